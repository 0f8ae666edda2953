"""deploy/'s prepare hook (the discovery sidecar's ``--prepare-cmd``) is the one elastic-run's own
daemons run, reap included: before a worker is served it stops what an earlier try of the Job
left there (the Job's other runs, by ``ELASTIC_JOB_ID``) and keeps this try's run (the launcher's
``--run-id``, the launcher pod's uid). Before, the hook only pinned and synced: a worker served
after the launcher's start kept an earlier try's training until its lease ran out.

The manifests are rendered as a user would (``kubectl kustomize``), ``$(VAR)`` expanded as the
kubelet does; the hook runs for real against a pod of the local cluster."""
from __future__ import annotations

import shlex
import subprocess
import sys
import uuid

import pytest

from elastic.common.reap import JOB_ID_ENV, RUN_ID_ENV
from elastic.prepare.hook import build_parser
from localcluster.testing import running_cluster
from tests.deploy.render import DEPLOY, JOB_UID, POD_UID, container, expand, one, pod_labels, pod_spec, render
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def launcher() -> dict:
    return one(render(DEPLOY), "Job")


def _flag(argv: list[str], name: str) -> str:
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {argv}")


def hook_argv(job: dict) -> list[str]:
    """The sidecar's prepare command as the daemon runs it (split like a shell, no shell)."""
    daemon = container(pod_spec(job), "discovery-daemon")
    raw = _flag(daemon["args"], "--prepare-cmd")
    return shlex.split(expand(raw, daemon, pod_labels(job)))


def launcher_args(job: dict) -> tuple[list[str], dict[str, str]]:
    """The launcher container's args and env values, expanded."""
    c = container(pod_spec(job), "launcher")
    labels = pod_labels(job)
    envs = {e["name"]: expand(f"$({e['name']})", c, labels) for e in c.get("env", [])}
    return [expand(a, c, labels) for a in c["args"]], envs


def test_the_hook_reaps_the_jobs_other_runs_and_keeps_the_launchers_run(launcher):
    """The hook stops job ELASTIC_JOB_ID's other runs, keeping the run the launcher says it is."""
    argv = hook_argv(launcher)
    assert argv[1:3] == ["-m", "elastic.prepare.hook"]
    hook = build_parser().parse_args([*argv[3:], "--", "10.0.0.1"])
    args, envs = launcher_args(launcher)
    assert hook.reap_job == envs["ELASTIC_JOB_ID"] == JOB_UID
    assert hook.keep_run == _flag(args[: args.index("--")], "--run-id") == POD_UID


def _start_tagged(cluster, pod: str, job: str, run: str) -> int:
    """A process on ``pod`` tagged as a worker of ``run`` of ``job`` (detached: it outlives the
    ssh session, as an earlier try's training does once its launcher is gone); its pid there."""
    proc = cluster.ssh(pod, f"{JOB_ID_ENV}={job} {RUN_ID_ENV}={run} setsid sleep 3041 </dev/null >/dev/null 2>&1 & "
                            "echo $!")
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip())


def _alive(cluster, pod: str, pid: int) -> bool:
    return cluster.ssh(pod, f"kill -0 {pid}").returncode == 0


@pytest.mark.timeout(300)
def test_the_manifests_hook_stops_an_earlier_try_on_a_worker_before_it_is_served(launcher, tmp_path):
    """The hook from the manifest, its paths pointed at the local cluster's (key, ssh dir, port;
    no dataset), run for a pod where an earlier try of the Job trains beside this try's worker
    and another job's: only the earlier try's process ends, and the hook succeeds."""
    with running_cluster(tmp_path / "cluster", workers=1) as cluster:
        pod = cluster.core_v1().list_namespaced_pod("default").items[0].metadata.name
        ip = cluster.pod_ip(pod)
        other_job = uuid.uuid4().hex[:16]
        old = _start_tagged(cluster, pod, JOB_UID, uuid.uuid4().hex)
        ours = _start_tagged(cluster, pod, JOB_UID, POD_UID)
        foreign = _start_tagged(cluster, pod, other_job, uuid.uuid4().hex)
        try:
            argv = hook_argv(launcher)
            local = {"--identity": str(cluster.identity), "--ssh-dir": str(tmp_path / "ssh"),
                     "--ssh-port": str(cluster.ssh_port)}
            run, i = [sys.executable], 1
            while i < len(argv):
                if argv[i] in local:
                    run += [argv[i], local[argv[i]]]
                    i += 2
                elif argv[i] == "--dataset":
                    i += 2
                else:
                    run.append(argv[i])
                    i += 1
            proc = subprocess.run([*run, "--", ip], capture_output=True, text=True, timeout=180,
                                  stdin=subprocess.DEVNULL)
            assert proc.returncode == 0, proc.stderr
            wait_for(lambda: not _alive(cluster, pod, old), 30, "the earlier try's process to end")
            assert _alive(cluster, pod, ours), "the hook stopped this try's own worker"
            assert _alive(cluster, pod, foreign), "the hook stopped another job's worker"
        finally:
            cluster.ssh(pod, f"kill -KILL {old} {ours} {foreign}")
