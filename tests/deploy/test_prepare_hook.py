"""deploy/'s prepare hook (the discovery sidecar's ``--prepare-cmd``) is the one elastic-run's own
daemons run with an adoption window: before a worker is served it pins its host key and syncs
the dataset, and stops nothing. The launcher runs with an adoption window
(``ELASTIC_ADOPT_WINDOW``), so what an earlier try of the Job left on a worker is the world this
try's leader adopts, or ends at its window (a leader that cannot adopt waits for that); a reap
there would end the world being adopted.

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
from tests.deploy.render import DEPLOY, JOB_UID, container, expand, one, pod_labels, pod_spec, render


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


def test_the_hook_reaps_nothing_where_the_launcher_adopts(launcher):
    """The hook stops no run of the job (no ``--reap-job``), and the launcher beside it has the
    adoption window that makes that safe (its workers end at the window unless adopted)."""
    argv = hook_argv(launcher)
    assert argv[1:3] == ["-m", "elastic.prepare.hook"]
    hook = build_parser().parse_args([*argv[3:], "--", "10.0.0.1"])
    assert hook.reap_job is None and hook.keep_run is None
    _, envs = launcher_args(launcher)
    assert float(envs["ELASTIC_ADOPT_WINDOW"]) > 0


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
def test_the_manifests_hook_keeps_an_earlier_try_on_a_worker_it_serves(launcher, tmp_path):
    """The hook from the manifest, its paths pointed at the local cluster's (key, ssh dir, port;
    no dataset), run for a pod where an earlier try of the Job trains (waiting to be adopted)
    beside another job's: the hook succeeds and both still run."""
    with running_cluster(tmp_path / "cluster", workers=1) as cluster:
        pod = cluster.core_v1().list_namespaced_pod("default").items[0].metadata.name
        ip = cluster.pod_ip(pod)
        old = _start_tagged(cluster, pod, JOB_UID, uuid.uuid4().hex)
        foreign = _start_tagged(cluster, pod, uuid.uuid4().hex[:16], uuid.uuid4().hex)
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
            assert _alive(cluster, pod, old), "the hook stopped the earlier try's worker, which waits to be adopted"
            assert _alive(cluster, pod, foreign), "the hook stopped another job's worker"
        finally:
            cluster.ssh(pod, f"kill -KILL {old} {foreign}")
