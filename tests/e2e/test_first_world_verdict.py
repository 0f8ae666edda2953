"""At the first-world deadline, elastic-run tells a lack of capacity from failing workers, on
the local cluster with real pods, daemon, prepare hook and horovodrun:

- a worker whose preparation keeps failing (its /data/mnist is a directory dataset-sync does
  not manage, so every sync refuses it: a lasting failure, as a stale copy on a claim or a full
  disk would be) ends the run with a counted failure, exit 69, the reason as the last line;
- a worker whose container dies on its own (its sshd, the worker container's one process,
  exits: the local cluster's kubelet reports the pod Failed, where a real one restarts it into
  CrashLoopBackOff; the daemon calls both "failing") ends the run likewise, exit 69, the pod
  named as failing in the last line;
- a worker the pool has no place for (the node's capacity is full: Pending, unscheduled)
  still gives 75, so deploy/'s Job tries again without counting a failure.

The pure rule is tests/elastic/launch/test_shortfall.py."""
import subprocess
import sys

import pytest

from localcluster.testing import running_cluster
from shared.exitcodes import EXIT_NO_CAPACITY, EXIT_WORKERS_FAILING
from tests.e2e.test_capped_pool import pods_of, ready, replicaset
from tests.e2e.test_grows_to_max_np import BIN, env
from tests.waiting import wait_for


def elastic_run(c, selector: str, first_world_timeout: float, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "elastic-run"), "--selector", selector, "--kubeconfig", str(c.kubeconfig),
         "--ssh-port", str(c.ssh_port), "--ssh-identity-file", str(c.identity), "--network-interface", "lo",
         "--min-np", "2", "--max-np", "2", "--elastic-timeout", "600",
         "--first-world-timeout", str(first_world_timeout), *extra,
         "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=300, env=env())


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


@pytest.mark.timeout(420)
def test_a_worker_whose_preparation_keeps_failing_is_a_counted_failure_with_its_reason(tmp_path):
    data = tmp_path / "mnist"
    data.mkdir()
    (data / "train-images-idx3-ubyte").write_bytes(b"\0" * 64)
    with running_cluster(tmp_path / "cluster", workers=2) as c:
        stray = c.pod_data_dir("worker-1") / "mnist"
        stray.mkdir()
        (stray / "old-copy").write_text("not dataset-sync's\n")
        run = elastic_run(c, "app=elastic-horovod,role=worker", 40, "--dataset", f"{data}:/data/mnist")
    out = run.stderr
    assert run.returncode == EXIT_WORKERS_FAILING, out[-4000:]
    line = last_line(out)
    assert line.startswith("elastic-run: error: no world of --min-np 2 slots formed within "), out[-4000:]
    assert "not for lack of capacity" in line and "worker-1: prepare failed" in line, line
    assert "dataset-sync to " in line and "failed" in line, line
    assert line.endswith(f"exiting {EXIT_WORKERS_FAILING} (workers failing): a retry would meet the same failure")


@pytest.mark.timeout(420)
def test_a_worker_the_pool_has_no_place_for_still_gives_no_capacity(tmp_path):
    from kubernetes import client, config

    with running_cluster(tmp_path / "cluster", workers=0, capacity=1) as c:
        api = config.new_client_from_config(config_file=str(c.kubeconfig))
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        apps.create_namespaced_replica_set("default", replicaset("a", 2, c.ssh_port))
        wait_for(lambda: sorted(ready(p) for p in pods_of(core, "a")) == [False, True], 120,
                 "one pod Ready, one waiting for a place")
        [waiting] = [p.metadata.name for p in pods_of(core, "a") if not p.spec.node_name]
        run = elastic_run(c, "app=elastic-horovod,job=a,role=worker", 10)
    out = run.stderr
    assert run.returncode == EXIT_NO_CAPACITY, out[-4000:]
    line = last_line(out)
    assert line.startswith("elastic-run: error: no world of --min-np 2 slots formed within "), out[-4000:]
    assert f"the rest lack capacity: {waiting}: not scheduled" in line, line
    assert line.endswith("exiting 75 (no capacity) so the workers can be freed and the job tried again later")


def _phase(c, name: str) -> str:
    return (c.client.get_pod(name, "default").get("status") or {}).get("phase", "")


@pytest.mark.timeout(420)
def test_a_worker_whose_container_dies_is_a_counted_failure_with_its_reason(tmp_path):
    with running_cluster(tmp_path / "cluster", workers=2) as c:
        # the worker container's process ends on its own (sshd is pid 1 of the pod's namespace;
        # the session ends with it, so its exit status says nothing)
        c.ssh("worker-1", "kill -TERM 1", timeout=60)
        wait_for(lambda: _phase(c, "worker-1") == "Failed", 60, "worker-1 Failed")
        run = elastic_run(c, "app=elastic-horovod,role=worker", 20)
    out = run.stderr
    assert run.returncode == EXIT_WORKERS_FAILING, out[-4000:]
    line = last_line(out)
    assert line.startswith("elastic-run: error: no world of --min-np 2 slots formed within "), out[-4000:]
    assert "not for lack of capacity" in line and "worker-1: failing (pod Failed" in line, line
    assert line.endswith(f"exiting {EXIT_WORKERS_FAILING} (workers failing): a retry would meet the same failure")
