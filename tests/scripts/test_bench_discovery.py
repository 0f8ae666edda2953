"""scripts/benchmarks/bench-discovery ends, with a one-line error, when one of its worker processes dies.

The helpers (scripts/benchmarks/bench_discovery_workers.py) on real forked processes: killed, exited,
raised, silent past the deadline; and the benchmark itself on a small local cluster, its group
readers' process killed with SIGKILL in the middle of the churn section: the benchmark exits
non-zero within a deadline, its last line the error, no traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.waiting import wait_for

BENCHMARKS = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_discovery_workers as workers  # noqa: E402


def _reports_then_sleeps(report) -> None:  # type: ignore[no-untyped-def]
    report(42)
    time.sleep(600)


def _exits(code: int, report) -> None:  # type: ignore[no-untyped-def]
    os._exit(code)


def _raises(report) -> None:  # type: ignore[no-untyped-def]
    raise RuntimeError("reader got 3 hosts,\nwant 4")


def _silent(report) -> None:  # type: ignore[no-untyped-def]
    time.sleep(600)


def test_a_value_reported_is_returned() -> None:
    w = workers.start("bench-test", _reports_then_sleeps)
    try:
        assert w.result(60, "the test worker") == 42
    finally:
        workers.stop_all()
    assert not w.process.is_alive()


def test_a_killed_worker_is_a_one_line_error() -> None:
    w = workers.start("bench-test", _silent)
    try:
        wait_for(lambda: w.process.is_alive(), 30, "the worker to start")
        os.kill(w.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        with pytest.raises(workers.WorkerFailed) as e:
            w.result(120, "the test worker")
        assert str(e.value) == f"error: the test worker (bench-test, pid {w.process.pid}) was killed by SIGKILL " \
                               "before reporting"
    finally:
        workers.stop_all()


@pytest.mark.parametrize("target, args, message", [
    (_exits, (3,), "exited with code 3 before reporting"),
    (_raises, (), "failed: RuntimeError: reader got 3 hosts, want 4"),
])
def test_a_worker_that_ends_without_a_value_is_a_one_line_error(target, args, message) -> None:  # type: ignore[no-untyped-def]
    w = workers.start("bench-test", target, *args)
    try:
        with pytest.raises(workers.WorkerFailed) as e:
            w.result(120, "the test worker")
        assert message in str(e.value) and "\n" not in str(e.value)
        w.process.join(30)
        with pytest.raises(workers.WorkerFailed):
            w.check("the test worker")
    finally:
        workers.stop_all()


def test_a_silent_worker_is_an_error_at_the_deadline() -> None:
    w = workers.start("bench-test", _silent)
    try:
        w.check("the test worker")  # alive: no error
        with pytest.raises(workers.WorkerFailed, match="reported nothing in 1 s"):
            w.result(1, "the test worker")
    finally:
        workers.stop_all()
    assert not w.process.is_alive()


def _children_named(pid: int, name: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        if comm == name and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


@pytest.mark.slow
def test_the_benchmark_ends_with_one_line_when_its_readers_die(tmp_path: Path) -> None:
    argv = [sys.executable, str(BENCHMARKS / "bench-discovery"), "--pods", "2", "--runs", "1", "--freshness", "1",
            "--push", "0", "--scale", "40", "--groups", "2", "--readers", "2", "--requests", "1",
            "--churn-rate", "4", "--churn-seconds", "600", "--poll-hz", "2"]
    err = tmp_path / "stderr"
    with err.open("w") as fh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fh)
    try:
        readers = wait_for(lambda: _children_named(proc.pid, "bench-readers"), 400,
                           "the benchmark's group readers process", interval=0.2,
                           alive=lambda: None if proc.poll() is None else pytest.fail(
                               f"the benchmark ended first: {err.read_text()[-2000:]}"))
        os.kill(readers[0], signal.SIGKILL)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.read_text().splitlines()
    assert proc.returncode == 1, lines[-20:]
    assert "Traceback" not in err.read_text(), lines[-40:]
    assert lines[-1].startswith("error: the group readers (bench-readers, pid ") \
        and lines[-1].endswith("was killed by SIGKILL before reporting"), lines[-5:]
