"""scripts/benchmarks/bench-elastic's fault rounds: bad flags are one-line errors (exit 2), and the freeze
the rounds use stops every process of a local-cluster pod (its sshd too: ssh to it hangs)
until the pod is deleted, which still works on a frozen pod."""
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_for

BENCHMARKS = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_elastic_faults as bf  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--scenario", "freeze-ready,bogus"], "--scenario wants a comma list of"),
    (["--kill-rounds", "0"], "--kill-rounds must be at least 1"),
    (["--round-timeout", "-1"], "--round-timeout must be positive"),
    (["--join-rounds", "0"], "--join-rounds must be at least 1"),
    (["--joiner-sleep", "0"], "--joiner-sleep must be positive"),
    (["--scenario", "join", "--synthetic-example", "/nonexistent/example.py"], "--synthetic-example: no such file"),
])
def test_bad_flags_are_one_line_errors(argv, message):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench-elastic"), *argv], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return None


def test_freeze_stops_every_process_of_the_pod(cluster):
    cluster.create_pod("w")
    cluster.wait_ready("w", timeout=60)
    ns = bf.pod_namespace(cluster, "w")
    assert ns is not None
    assert bf.freeze_pod(cluster, "w") >= 1
    pids = bf.procs.in_namespace(ns)
    assert pids and wait_for(lambda: all(_state(p) in ("T", None) for p in pids), 10, "every process stopped")
    with pytest.raises(subprocess.TimeoutExpired):  # its sshd answers no more
        cluster.ssh("w", "true", timeout=3)
    cluster.delete_pod("w", grace_seconds=0)
    cluster.wait_gone("w", timeout=60)
    wait_for(lambda: not bf.procs.in_namespace(ns), 30, "the frozen pod's processes gone")
