"""The training package's error tree and what each error means for the exit code.

    TrainingError              root: the command prints ``error: <message>`` (one line)
    +-- InputError             bad input or usage: exit 2 (argparse's convention)
    |   +-- ConfigError        a bad flag or environment value
    |   +-- DatasetError       a missing or malformed dataset (names the path and what is wrong)
    +-- CheckpointError        a checkpoint that cannot be read or written: exit 1
    |   +-- StaleWriter        a newer generation is present: this run must not write
    +-- DeviceError            the training device cannot do what was asked (e.g. decode
    |                          JPEGs for --augment-on-device): exit 1
    +-- DigitsError            ``python -m training.digits``: scikit-learn or its digits are
                               missing, or a flag is out of range: exit 1

Every other failure while training is a runtime failure, exit 1; a worker ended by signal N
exits 128 + N (SIGTERM: 143, see ``training.signals``). Library errors (OSError, torch/PIL
errors) are wrapped at the edge with ``raise ... from``. The codes are the project's
(``shared.exitcodes``); ``training.cli`` turns an error into its line and code with the
project's runner (``shared.runner``).
"""

from __future__ import annotations

from shared.exitcodes import EXIT_FAILURE, EXIT_USAGE


class TrainingError(Exception):
    """Root of every error this package raises on purpose; a runtime failure (exit 1)."""

    exit_code = EXIT_FAILURE


class InputError(TrainingError):
    """Bad input or usage (exit 2)."""

    exit_code = EXIT_USAGE


class ConfigError(InputError):
    """A flag or environment value is invalid."""


class DatasetError(InputError):
    """The dataset is missing or malformed; the message names the file or directory."""


class CheckpointError(TrainingError):
    """A checkpoint cannot be read or written (a runtime failure, exit 1)."""


class DeviceError(TrainingError):
    """The training device cannot do what the flags ask (a runtime failure, exit 1); the
    message names the cause and the way out."""


class StaleWriter(CheckpointError):
    """A run tried to write a checkpoint while a newer generation is present."""


class DigitsError(TrainingError):
    """scikit-learn or its digits are missing, or a flag is out of range (exit 1)."""
