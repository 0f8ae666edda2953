"""elastic.common.reap's job reap and SIGTERM path on this machine (each command run by
``sh -c``, as a pod's sshd runs it): a retried launcher's reap by ``ELASTIC_JOB_ID`` stops the
processes of the job's earlier runs and keeps its own run's and other jobs'; the SIGTERM path
signals each root of the run's process trees once (never a child of the training) and returns
once they are gone."""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from elastic.common.reap import JOB_ID_ENV, RUN_ID_ENV, reap_command, term_command
from tests.waiting import wait_for


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def untagged() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (RUN_ID_ENV, JOB_ID_ENV)}


def start(tmp_path: Path, name: str, job: str, run: str, script: str = "echo $$ > {name}; exec sleep 3021"):
    proc = subprocess.Popen(["sh", "-c", script.format(name=name)], cwd=tmp_path,
                            env={**untagged(), JOB_ID_ENV: job, RUN_ID_ENV: run})
    wait_for(lambda: (tmp_path / name).exists() and (tmp_path / name).read_text().strip(), 30, f"{name} to start")
    return proc


@pytest.mark.timeout(120)
def test_the_job_reap_stops_earlier_runs_and_keeps_this_one_and_other_jobs(tmp_path):
    """Before: a retried launcher had a new run id and its reap matched that id only; the old
    run's workers went on training beside the new world."""
    job, other_job = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    old_run, new_run = uuid.uuid4().hex, uuid.uuid4().hex
    procs = {"old": start(tmp_path, "old", job, old_run), "new": start(tmp_path, "new", job, new_run),
             "other": start(tmp_path, "other", other_job, old_run)}
    try:
        reap = subprocess.run(["sh", "-c", reap_command(new_run, grace=1.0, job_id=job)], env=untagged(),
                              capture_output=True, text=True, timeout=60)
        assert reap.returncode == 0, reap.stderr
        wait_for(lambda: procs["old"].poll() is not None, 10, "the earlier run's process to end")
        assert procs["new"].poll() is None and procs["other"].poll() is None
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_a_bad_job_id_is_refused():
    with pytest.raises(ValueError, match="bad job id"):
        reap_command("abc", job_id="a b")


# the training stand-in: leaves on SIGTERM (after a moment, as a commit and a checkpoint take),
# counting the SIGTERMs it got; its child must get none
TRAINER = ("sh -c 'trap \"echo child >> terms\" TERM; while :; do sleep 0.05; done' & c=$!; echo $c > child; "
           "trap 'echo root >> terms; sleep 0.5; kill -KILL $c; exit 143' TERM; echo $$ > root; "
           "while :; do sleep 0.05; done")


@pytest.mark.timeout(120)
def test_term_signals_each_root_once_and_waits_for_the_run_to_end(tmp_path):
    run = uuid.uuid4().hex
    proc = start(tmp_path, "root", "job", run, TRAINER)
    try:
        wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "child").read_text().strip(), 30,
                 "the trainer's child")
        child = int((tmp_path / "child").read_text())
        term = subprocess.run(["sh", "-c", term_command(run, wait=30)], env=untagged(), capture_output=True,
                              text=True, timeout=60)
        assert term.returncode == 0, term.stderr
        assert proc.poll() == 143  # it had ended when the command returned
        assert gone(child)
        assert (tmp_path / "terms").read_text().split() == ["root"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(120)
def test_term_says_when_the_run_did_not_end(tmp_path):
    run = uuid.uuid4().hex
    proc = start(tmp_path, "root", "job", run, "trap '' TERM; echo $$ > {name}; while :; do sleep 0.05; done")
    try:
        term = subprocess.run(["sh", "-c", term_command(run, wait=1)], env=untagged(), capture_output=True,
                              text=True, timeout=60)
        assert term.returncode == 1
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
