"""A job started with --max-np 4 and two worker pods grows to four pods
by itself and trains at size 4. The workers are a ReplicaSet of 2 in the local cluster (its
apps/v1 ReplicaSets and their controller: localcluster.replicasets); the launcher pod's
worker-start (elastic.scaler.scale_workers --phase start, the official client) sets it to
--replicas 4, what --max-np 4 needs with one slot per pod; the controller makes two pods, the
discovery daemon serves them once prepared, horovodrun adds them, and the training runs at 4.
The scale comes once the job trains at size 2, so the growth is seen in a running job."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster import control
from localcluster.testing import running_cluster
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
LABELS = {"app": "elastic-horovod", "role": "worker"}
JOB = Path(__file__).with_name("grow_job.py")


def env(**extra: str) -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    e["PYTHONUNBUFFERED"] = "1"
    for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET"):
        e.pop(name, None)
    return {**e, **extra}


def replicaset(replicas: int, ssh_port: int) -> dict:
    template = control.worker_pod("template", ssh_port=ssh_port, labels=LABELS)
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "workers"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS},
                     "template": {"metadata": {"labels": LABELS}, "spec": template["spec"]}}}


def ready_pods(core) -> list[str]:
    pods = core.list_namespaced_pod("default", label_selector="app=elastic-horovod,role=worker").items
    return sorted(p.metadata.name for p in pods if not p.metadata.deletion_timestamp and p.status.conditions
                  and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions))


def alive(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        pytest.fail(f"elastic-run ended early ({proc.returncode}): {proc.stdout.read()[-4000:] if proc.stdout else ''}")


@pytest.mark.timeout(900)
def test_a_job_of_two_pods_and_max_np_4_grows_to_four_pods_by_itself_and_trains_at_4(tmp_path):
    from kubernetes import client, config

    sizes = tmp_path / "sizes"
    with running_cluster(tmp_path / "cluster", workers=0) as c:
        api = config.new_client_from_config(config_file=str(c.kubeconfig))
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        apps.create_namespaced_replica_set("default", replicaset(2, c.ssh_port))
        wait_for(lambda: len(ready_pods(core)) == 2, 120, "the ReplicaSet's two pods to be Ready")
        first_two = ready_pods(core)
        run = subprocess.Popen(
            [str(BIN / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
             "--kubeconfig", str(c.kubeconfig), "--ssh-port", str(c.ssh_port),
             "--ssh-identity-file", str(c.identity), "--network-interface", "lo",
             "--min-np", "2", "--max-np", "4", "--elastic-timeout", "300",
             "--blacklist-cooldown-range", "5", "30", "-x", "OMP_NUM_THREADS=1",
             "--", sys.executable, str(JOB)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env(TARGET_SIZE="4", SIZES_FILE=str(sizes)))
        try:
            # the job trains on the two pods it has; then the launcher pod's worker-start runs
            wait_for(lambda: sizes.exists() and "size 2 " in sizes.read_text(), 600,
                     "the training at size 2", interval=0.5, alive=lambda: alive(run))
            start = subprocess.run(
                [sys.executable, "-m", "elastic.scaler.scale_workers", "--phase", "start",
                 "--workers", "replicasets/workers", "--min-replicas", "2", "--replicas", "4",
                 "--namespace", "default", "--kubeconfig", str(c.kubeconfig)],
                capture_output=True, text=True, timeout=120, env=env())
            assert start.returncode == 0, start.stderr
            assert "replicasets/workers scaled to 4 (was 2)" in start.stderr
            out, _ = run.communicate(timeout=780)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 0, out[-4000:]
        lines = sizes.read_text().splitlines()
        assert lines[0].startswith("size 2 ") and lines[-1].startswith("size 4 "), lines
        scale = apps.read_namespaced_replica_set_scale("workers", "default")
        assert scale.spec.replicas == 4 and scale.status.replicas == 4
        pods = ready_pods(core)
        assert len(pods) == 4 and set(first_two) <= set(pods)
        assert all(p.startswith("workers-") for p in pods)
