"""elastic-run --stall-timeout with the project's own training (training.mnist): a job that
trains steadily, committing every few steps with no reset and no host change, for longer than
the timeout is making progress, not stalled. Its ranks' commits reach the driver (``progress``
events) and the watchdog leaves it alone. Found by a 30-minute soak (seed 49020243): after the
last world change, a healthy world of 4 training for 900 s was stopped as stalled (default
--stall-timeout 900), because training/loop.py's commit never reported progress."""
import json
import subprocess
import sys

import pytest

from shared.event_kinds import Kind
from tests.elastic.launch.conftest import env, launcher_args


@pytest.mark.timeout(1200)
def test_a_job_that_commits_is_not_stalled(two_pods, tmp_path):
    events = tmp_path / "events.jsonl"
    proc = subprocess.run(
        launcher_args(two_pods, tmp_path, "--stall-timeout", "60", "--elastic-timeout", "600",
                      "--events-file", str(events), "-x", "OMP_NUM_THREADS=1")
        # 40 steps of 2 s (1280 samples, 2 ranks of 32, 2 epochs): 80 s of training, past the
        # 60 s timeout, which must exceed a loaded worker's import gap (worker_start to ready)
        + ["--", sys.executable, "-m", "training.mnist", "--synthetic", "--synthetic-size", "1280",
           "--epochs", "2", "--batch-size", "32", "--commit-every", "2", "--debug-step-delay", "2"],
        capture_output=True, text=True, timeout=1100, env=env(), stdin=subprocess.DEVNULL)
    assert "the job stalled" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    progress = [r for r in records if r["kind"] == Kind.PROGRESS]
    assert {r["detail"]["host"] for r in progress} == {two_pods.pod_ip(f"worker-{i}") for i in (0, 1)}, records[-5:]
