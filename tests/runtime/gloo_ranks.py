"""The rank side of the Gloo job scripts here (gloo_kill_job.py, gloo_abort_job.py): their
settings, ``record`` and the step loop ``train``. A job script imports it as ``gloo_ranks``
(horovodrun runs the script by its path, so this folder is first on ``sys.path``).

Settings (environment):
    GLOO_JOB_DIR          where each rank writes ``events.<rank>.jsonl`` (one JSON object a
                          line: ``event``, ``t`` (time.time()), ``rank`` and details); the test
                          side reads them (tests/runtime/gloo_jobs.py).
    GLOO_JOB_MAX_SECONDS  the rank gives up after this long (default 600).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

OUT = Path(os.environ["GLOO_JOB_DIR"])
RANK = int(os.environ["HOROVOD_RANK"])
DEADLINE = time.monotonic() + float(os.environ.get("GLOO_JOB_MAX_SECONDS", "600"))
ELEMENTS = 16 * 1024 * 1024  # 64 MB of float32: Gloo's ring sends it in 1 MB segments, far more than a socket buffer


def record(event: str, **details) -> None:
    with open(OUT / f"events.{RANK}.jsonl", "a") as f:
        f.write(json.dumps({"event": event, "t": time.time(), "rank": RANK, **details}) + "\n")


def train(hvd, tensor, after_allreduce: Callable[[int], None] | None = None,
          stop_before: Callable[[int], bool] | None = None) -> bool:
    """Steps 0, 1, ...: each records ``step``, averages ``tensor`` in place (hvd.allreduce_,
    name "big"), runs ``after_allreduce(step)`` and records ``step_done``. Returns True when
    a step raised HorovodInternalError (recorded as ``error`` with its message) or when
    ``stop_before(step)`` said to stop before a step; False at the deadline."""
    from horovod.common.exceptions import HorovodInternalError

    step = 0
    while time.monotonic() < DEADLINE:
        if stop_before is not None and stop_before(step):
            return True
        record("step", step=step)
        try:
            hvd.allreduce_(tensor, op=hvd.Average, name="big")
            if after_allreduce is not None:
                after_allreduce(step)
        except HorovodInternalError as e:
            record("error", step=step, message=str(e)[:300])
            return True
        record("step_done", step=step)
        step += 1
    return False
