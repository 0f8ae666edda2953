"""The training package's error tree.

    TrainingError              base: the command prints ``error: <message>`` and exits 2
    +-- ConfigError            a bad flag or environment value
    +-- DatasetError           a missing or malformed dataset (names the path and what is wrong)
    +-- CheckpointError        a checkpoint that cannot be read or written

Library errors (OSError, torch/PIL errors) are wrapped at the edge with ``raise ... from``.
"""

from __future__ import annotations


class TrainingError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(TrainingError):
    """A flag or environment value is invalid."""


class DatasetError(TrainingError):
    """The dataset is missing or malformed; the message names the file or directory."""


class CheckpointError(TrainingError):
    """A checkpoint cannot be read or written."""
