"""Two jobs on a pool capped below the sum of their floors each hold part of
it and would wait an hour per try (--elastic-timeout) for the rest. With
--first-world-timeout the job that cannot form its first world exits 75 (no capacity); the
launcher pod's worker scaler decides to free its workers (``stop_decision``: zero on 75, the
decision deploy/'s worker-scaler acts on), the other job's waiting pod gets the place and that
job trains to its end; then the first job's retry trains too. Nobody waits an hour, nobody
deadlocks.

The pool: the local cluster's node with ``capacity=2`` (localcluster.kubelet: pods beyond it
stay Pending, unscheduled, and are bound oldest first as places free up). Jobs A and B are
ReplicaSets of 2 (floor 2) that each got one place."""
import subprocess
import sys

import pytest

from elastic.launch.gang import EXIT_NO_CAPACITY, JITTER
from elastic.scaler.scale_workers import stop_decision
from localcluster import control
from localcluster.testing import running_cluster
from tests.e2e.test_grows_to_max_np import BIN, JOB, env
from tests.waiting import wait_for


def replicaset(name: str, replicas: int, ssh_port: int) -> dict:
    labels = {"app": "elastic-horovod", "job": name, "role": "worker"}
    template = control.worker_pod("template", ssh_port=ssh_port, labels=labels)
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": template["spec"]}}}


def pods_of(core, job: str) -> list:
    return [p for p in core.list_namespaced_pod("default", label_selector=f"job={job}").items
            if not p.metadata.deletion_timestamp]


def ready(pod) -> bool:
    return bool(pod.status.conditions) and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)


def launcher(c, job: str, first_world_timeout: float, sizes, log) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "elastic-run"), "--selector", f"app=elastic-horovod,job={job},role=worker",
         "--kubeconfig", str(c.kubeconfig), "--ssh-port", str(c.ssh_port),
         "--ssh-identity-file", str(c.identity), "--network-interface", "lo",
         "--min-np", "2", "--max-np", "2", "--elastic-timeout", "600",
         "--first-world-timeout", str(first_world_timeout), "-x", "OMP_NUM_THREADS=1",
         "--", sys.executable, str(JOB)],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=env(TARGET_SIZE="2", SIZES_FILE=str(sizes)))


def exited_with(code: int) -> dict:
    """The launcher pod as the API shows it once its launcher container exited ``code``."""
    return {"metadata": {"name": "launcher"},
            "status": {"containerStatuses": [{"name": "launcher", "state": {"terminated": {"exitCode": code}}}]}}


def scale(apps, name: str, replicas: int) -> None:
    apps.patch_namespaced_replica_set_scale(name, "default", {"spec": {"replicas": replicas}})


@pytest.mark.timeout(900)
def test_two_jobs_on_a_capped_pool_neither_waits_for_the_other(tmp_path):
    from kubernetes import client, config

    with running_cluster(tmp_path / "cluster", workers=0, capacity=2) as c:
        api = config.new_client_from_config(config_file=str(c.kubeconfig))
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        for job in ("a", "b"):  # one place each, then both ask for their floor of 2
            apps.create_namespaced_replica_set("default", replicaset(job, 1, c.ssh_port))
            wait_for(lambda job=job: [ready(p) for p in pods_of(core, job)] == [True], 120, f"job {job}'s pod")
        for job in ("a", "b"):
            scale(apps, job, 2)
        wait_for(lambda: all(len(pods_of(core, j)) == 2 for j in "ab"), 60, "both sets at 2 pods")
        pending = [p for j in "ab" for p in pods_of(core, j) if not p.spec.node_name]
        assert len(pending) == 2, "the pool is full: each job's second pod waits for a place"

        sizes = {j: tmp_path / f"sizes-{j}" for j in "ab"}
        logs = {j: open(tmp_path / f"elastic-run-{j}.log", "w") for j in "ab"}
        runs: list[subprocess.Popen] = []
        try:
            a = launcher(c, "a", 10, sizes["a"], logs["a"])
            b = launcher(c, "b", 600, sizes["b"], logs["b"])
            runs = [a, b]
            # A cannot form a world of 2: it gives up within its deadline (10-12.5 s after
            # horovodrun started), instead of holding its place for --elastic-timeout
            assert a.wait(timeout=180) == EXIT_NO_CAPACITY, (tmp_path / "elastic-run-a.log").read_text()[-4000:]
            out_a = (tmp_path / "elastic-run-a.log").read_text()
            assert "no world of --min-np 2 slots formed within" in out_a and "(--first-world-timeout)" in out_a
            within = float(out_a.split("formed within ")[1].split(" s")[0])  # the drawn deadline, rounded
            assert 10 <= within <= round(10 * (1 + JITTER)), out_a[-2000:]
            assert not sizes["a"].exists(), "job A never trained"
            assert b.poll() is None, "job B still waits for its second place"
            # deploy/'s worker-scaler decides on the launcher's exit: free the workers
            assert stop_decision(exited_with(EXIT_NO_CAPACITY), "launcher").action == "zero"
            scale(apps, "a", 0)
            # B's waiting pod gets the freed place, and B trains at 2 to its end
            assert b.wait(timeout=600) == 0, (tmp_path / "elastic-run-b.log").read_text()[-4000:]
            assert sizes["b"].read_text().splitlines()[-1].startswith("size 2 ")
            # B is done (the scaler frees its workers on 0); A's retry gets the places and trains
            assert stop_decision(exited_with(0), "launcher").action == "zero"
            scale(apps, "b", 0)
            scale(apps, "a", 2)
            retry = launcher(c, "a", 600, sizes["a"], logs["a"])
            runs.append(retry)
            assert retry.wait(timeout=600) == 0, (tmp_path / "elastic-run-a.log").read_text()[-4000:]
            assert sizes["a"].read_text().splitlines()[-1].startswith("size 2 ")
        finally:
            for run in runs:
                if run.poll() is None:
                    run.kill()
                    run.wait()
            for f in logs.values():
                f.close()
