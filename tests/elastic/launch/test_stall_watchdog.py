"""elastic-run --stall-timeout: a job whose ranks deadlock (no error, no exit: stock horovodrun
waits forever) is stopped once no rank made progress for the timeout. elastic-run says what
each rank was last seen doing, exits 1, and leaves no training process on the pods."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.elastic.launch.conftest import env, launcher_args

HERE = Path(__file__).parent


def training_processes(job: Path) -> list[str]:
    """Command lines of processes still running this test's copy of deadlock_job.py (the
    pods are local processes; the copy's path is this test's own, so another run's job on the
    same machine is not counted)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(job) in line and "ps -eo" not in line]


@pytest.mark.timeout(400)
def test_a_deadlocked_job_is_stopped_and_reported(two_pods, tmp_path):
    hung = tmp_path / "hung"
    job = tmp_path / "deadlock_job.py"
    shutil.copy(HERE / "deadlock_job.py", job)
    proc = subprocess.run(
        launcher_args(two_pods, tmp_path, "--stall-timeout", "20", "-x", f"HUNG_FILE={hung}",
                      "-x", "OMP_NUM_THREADS=1")
        + ["--", sys.executable, str(job)],
        capture_output=True, text=True, timeout=360, env=env())
    assert hung.exists(), proc.stderr[-3000:]  # it did hang
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = proc.stderr
    assert "elastic-run: error: the job stalled (--stall-timeout): no rank made progress for" in err
    assert "(rank 0): committed (commit #3)" in err and "(rank 1): committed (commit #3)" in err
    assert "hosts discovered:" in err
    assert "training exited with 1" in err  # the timeline still comes
    assert training_processes(job) == []
