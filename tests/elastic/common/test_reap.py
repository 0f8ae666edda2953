"""elastic.common.reap on this machine (its command run by ``sh -c``, as a pod's sshd runs it):
a process the job starts while the reap stops it -- after the reap's scan -- is stopped too;
and ``python -m elastic.common.reap`` (the process ``reap_hosts`` starts) reaps every host it
is given and names the ones it could not reach."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from elastic.common.reap import RUN_ID_ENV, reap_command, reap_hosts
from tests.waiting import wait_for


def gone(pid: int) -> bool:
    """No live process has ``pid`` (a zombie counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def untagged_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}


# a job process that ignores SIGTERM and, when it gets one, starts another (tagged as it is)
LATE_CHILD = "trap 'sleep 3003 & echo $! > child' TERM; echo ready > ready; while :; do sleep 0.05; done"


@pytest.mark.timeout(120)
def test_a_process_started_after_the_scan_is_stopped_too(tmp_path):
    """Before: the reap SIGKILLed only the processes of its one scan, so the child started on
    SIGTERM (after the scan) was left running."""
    run_id = uuid.uuid4().hex
    job = subprocess.Popen(["sh", "-c", LATE_CHILD], cwd=tmp_path, env={**untagged_env(), RUN_ID_ENV: run_id})
    child = None
    try:
        wait_for((tmp_path / "ready").exists, 30, "the job to start")
        reap = subprocess.run(["sh", "-c", reap_command(run_id, grace=1.0)], env=untagged_env(),
                              capture_output=True, text=True, timeout=60)
        assert reap.returncode == 0, reap.stderr
        child = int(wait_for(lambda: (tmp_path / "child").read_text().strip() if (tmp_path / "child").exists()
                             else None, 10, "the job's child started on SIGTERM"))
        wait_for(lambda: job.poll() is not None, 10, "the job to be killed")
        assert gone(child), f"the child {child} started after the reap's scan is still running"
    finally:
        job.kill()
        job.wait()
        if child is not None and not gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_the_reap_process_reaches_every_host_and_names_the_failed(tmp_path):
    """``reap_hosts`` through a stand-in for ssh that runs the command here (``sh -c``), or
    fails for the host "down": the job's process is gone, only "down" is named."""
    run_id = uuid.uuid4().hex
    job = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready > ready; exec sleep 3004"], cwd=tmp_path,
                           env={**untagged_env(), RUN_ID_ENV: run_id})
    try:
        wait_for((tmp_path / "ready").exists, 30, "the job to start")
        fake_ssh = [sys.executable, "-c",
                    "import os, sys; host, cmd = sys.argv[1:]; "
                    "sys.exit(255) if host == 'down' else os.execvp('sh', ['sh', '-c', cmd])"]
        failed = reap_hosts(["here", "down"], fake_ssh, run_id, grace=0.5, timeout=60)
        assert failed == ["down"]
        wait_for(lambda: job.poll() is not None, 10, "the job's process to be killed")
    finally:
        job.kill()
        job.wait()
