"""The plan's part in "no second world": the job's identity every worker carries and
the prepare hook reaps by, the lease wrapper around the training command, the SIGTERM grace;
and their flags' bad values as one-line usage errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.common.reap import JOB_ID_ENV
from elastic.launch.command import HorovodrunOptions
from elastic.launch.plan import DEFAULT_TERM_GRACE, LaunchConfig, default_job_id, make_plan

TRAIN = ("python", "-m", "training.mnist")
ELASTIC_RUN = str(Path(sys.executable).parent / "elastic-run")


def plan_of(**kwargs):
    opts = HorovodrunOptions(discovery_script="/opt/bin/discover-hosts", min_np=2, ssh_identity_file="/id")
    cfg = LaunchConfig(horovodrun=opts, command=TRAIN, discovery_url=None, selector="app=x", **kwargs)
    return make_plan(cfg, run_id="r1", workdir="/tmp/w", tool=lambda n: f"/opt/bin/{n}", python_bin="/venv/bin")


def test_the_job_id_is_the_same_for_a_retry_and_differs_for_another_job():
    first, retry = plan_of(), plan_of()
    assert first.job_id == retry.job_id == default_job_id("default", "app=x", None, None, TRAIN)
    assert first.env[JOB_ID_ENV] == first.job_id
    assert plan_of(namespace="other").job_id != first.job_id
    assert plan_of(job_id="my-job").env[JOB_ID_ENV] == "my-job"


def test_the_training_runs_under_the_lease_and_the_hook_reaps_the_jobs_other_runs():
    plan = plan_of(lease=20.0)
    # "python" as the worker's PATH finds it, never the launcher's own path: a container pod
    # has no /venv (tests/images/test_container_cluster.py failed on it)
    assert plan.horovodrun[-9:] == ("python", "-m", "elastic.worker.lease", "--seconds", "20", "--", *TRAIN)
    assert plan.daemon is not None and f"--reap-job {plan.job_id} --keep-run r1" in plan.daemon.spec.prepare_cmd
    assert plan_of(lease=0.0).horovodrun[-3:] == TRAIN
    assert plan.term_grace == DEFAULT_TERM_GRACE


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("DISCOVERY_", "ELASTIC_"))}
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    return e


@pytest.mark.parametrize(("args", "extra_env", "line"), [
    (["--lease", "2"], {}, "error: --lease: the lease must be 0 (off) or 5..3600 seconds, got 2.0"),
    (["--lease", "soon"], {}, "error: --lease must be a number of seconds, got 'soon'"),
    ([], {"ELASTIC_LEASE": "nan"}, "error: ELASTIC_LEASE: the lease must be 0 (off) or 5..3600 seconds, got nan"),
    (["--term-grace", "0"], {}, "error: --term-grace must be more than 0 and at most 3600 seconds, got '0'"),
    (["--job-id", "a b"], {}, "error: --job-id must be 1 to 63 letters, digits or '-', got 'a b'"),
    ([], {"ELASTIC_JOB_ID": "x;y"}, "error: ELASTIC_JOB_ID must be 1 to 63 letters, digits or '-', got 'x;y'"),
])
def test_bad_values_are_one_line_usage_errors(args, extra_env, line):
    proc = subprocess.run([ELASTIC_RUN, "--dry-run", "--selector", "app=x", *args, "--", *TRAIN],
                          capture_output=True, text=True, env={**env(), **extra_env}, timeout=120)
    assert (proc.returncode, proc.stderr.strip()) == (2, line)


def test_the_dry_run_shows_the_lease_and_the_job():
    proc = subprocess.run([ELASTIC_RUN, "--dry-run", "--selector", "app=x", "--job-id", "j-1", "--lease", "30",
                           "--term-grace", "40", "--", *TRAIN], capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["job_id"], doc["lease"], doc["term_grace"]) == ("j-1", 30.0, 40.0)
    assert doc["horovodrun"][-7:-3] == ["elastic.worker.lease", "--seconds", "30", "--"]
