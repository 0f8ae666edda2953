"""Metrics records for tests that build them by hand: ``metrics_record(**fields)`` is a
``shared.metrics_record.MetricsRecord`` with every field a test does not name set to a
plain value (a progress record at world size 1, nothing trained yet)."""
from __future__ import annotations

from typing import Any

from shared.metrics_record import MetricsRecord

DEFAULTS: dict[str, Any] = {
    "event": "progress", "time": 0.0, "epoch": 1, "batch": 0, "world_size": 1, "samples": 0,
    "samples_per_sec": 0.0, "samples_per_sec_per_worker": 0.0, "loss": None, "accuracy": None,
    "lr": 0.1, "resets": 0,
}


def metrics_record(**fields: Any) -> MetricsRecord:
    """A record with ``fields`` and the defaults above for the rest."""
    return MetricsRecord(**{**DEFAULTS, **fields})
