"""The test side of the Gloo job scripts here (gloo_kill_job.py, gloo_abort_job.py), shared
by tests/runtime/test_patch_gloo_failed_collective.py and test_patch_gloo_abort.py.

``GlooJob(work, script, np, **env)`` starts ``horovodrun -np NP -H localhost:NP`` on
``script`` (its ranks write ``work/events/events.<rank>.jsonl``: tests/runtime/gloo_ranks.py)
with HOROVOD_GLOO_TIMEOUT_SECONDS = ``GLOO_TIMEOUT``; ``events``/``last`` read those files.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import kill_tagged, tagged_env

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
HOROVODRUN = str(BIN / "horovodrun")
GLOO_TIMEOUT = 120
PROMPT = 45  # how long a test waits for the survivors: well below GLOO_TIMEOUT


def events(out: Path, rank: int) -> list[dict]:
    """Every event ``rank`` recorded so far (a line still being written is left out)."""
    path = out / f"events.{rank}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def last(out: Path, rank: int, event: str) -> dict | None:
    """The last ``event`` of ``rank``, or None."""
    found = [e for e in events(out, rank) if e["event"] == event]
    return found[-1] if found else None


class GlooJob:
    """horovodrun -np ``np`` on localhost running ``script`` (a file beside this one) in a
    session of its own; ``env`` is added to the ranks' environment. Its ranks write their
    events in ``out`` and give up after 400 s; its output goes to ``log``. close() kills its
    process tree: horovodrun and every rank, stopped ones included (tests/processes.py)."""

    def __init__(self, work: Path, script: str, np: int, **env: str):
        self.out = work / "events"
        self.out.mkdir(parents=True)
        self.log = work / "horovodrun.out"
        full = dict(os.environ)
        full.update(PATH=f"{BIN}:{full.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                    HOROVOD_GLOO_TIMEOUT_SECONDS=str(GLOO_TIMEOUT), GLOO_JOB_DIR=str(self.out),
                    GLOO_JOB_MAX_SECONDS="400", **env)
        full, self.tag = tagged_env(full)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [HOROVODRUN, "-np", str(np), "-H", f"localhost:{np}", "--network-interface", "lo",
                 sys.executable, str(HERE / script)],
                stdout=log, stderr=subprocess.STDOUT, env=full, start_new_session=True)

    def detail(self) -> str:
        """The last events of each rank and the tail of horovodrun's output."""
        ranks = sorted(self.out.glob("events.*.jsonl"))
        tails = "\n".join(f"{p.name}: {p.read_text().splitlines()[-3:]}" for p in ranks)
        return f"{tails}\nhorovodrun: {self.log.read_text()[-3000:]}"

    def alive(self) -> None:
        """Fails the test at once if horovodrun has exited."""
        if self.proc.poll() is not None:
            pytest.fail(f"horovodrun exited ({self.proc.returncode}) early\n{self.detail()}", pytrace=False)

    def close(self) -> None:
        """Kills horovodrun and every process of the job (the ranks run in process groups of
        their own, patch 0102: a killpg of horovodrun's group would leave them, stopped ones
        forever)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        kill_tagged(self.tag)
        self.proc.wait()
