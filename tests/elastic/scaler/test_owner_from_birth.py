"""No worker runs without an owner: deploy/'s workers are a PodTemplate, and the launcher pod's
worker-start makes their ReplicaSet from it, owned by the launcher Job in the create itself.

On the local cluster (its PodTemplates, Jobs, ReplicaSets and their controller, and the garbage
collector's cascade from a deleted Job; localcluster.objects), through the official client,
with the objects and the worker-start command exactly as ``kubectl kustomize deploy/`` renders
them (one flag changed: --replicas 2, not 8 sshd pods):

- the manifests' worker template applied without a launcher makes no ReplicaSet and no pod;
- worker-start makes the ReplicaSet with the Job's ownerReference (controller,
  blockOwnerDeletion) from its creation, and its pods come; a retry keeps it as it is;
- deleting the Job deletes the ReplicaSet and its workers;
- a ReplicaSet no Job owns (made by hand, or applied by an earlier deploy/) is refused in one
  line, exit 2, and never adopted;
- the two launcher pods' worker-starts at once (a leader and a standby) make one ReplicaSet and
  both succeed;
- an earlier Job's ReplicaSet still there (a delete and a re-apply at once) is waited for, then
  made anew for the new Job; past --start-timeout, one line and exit 2.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from localcluster.testing import running_cluster
from tests.deploy.render import DEPLOY, container, env, expand, one, pod_labels, pod_spec, render
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def objects() -> list:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("owner") / "cluster") as c:
        yield c


@pytest.fixture(scope="module")
def apis(cluster):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    return client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)


def server_side(obj: dict) -> dict:
    """``obj`` without the fields a client does not send (as ``kubectl apply`` leaves them)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("namespace", "uid", "resourceVersion")}
    return {**obj, "metadata": meta}


def worker_start(objects: list, job_labels: dict, kubeconfig, namespace: str,
                 *extra: str) -> subprocess.CompletedProcess:
    """The rendered Job's worker-start command (``$(VAR)`` expanded as the kubelet does), with
    the cluster's namespace and kubeconfig and ``extra`` flags, run to its end."""
    start = container(pod_spec(one(objects, "Job")), "worker-start")
    args = [expand(a, start, job_labels) for a in start["args"]]
    assert args[:3] == ["python", "-m", "elastic.scaler.scale_workers"], args
    return subprocess.run([sys.executable, *args[1:], "--namespace", namespace, "--kubeconfig", str(kubeconfig),
                           "--start-timeout", "20", *extra], capture_output=True, text=True, timeout=120)


def live_pods(core, namespace: str) -> list:
    return [p for p in core.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp]


def test_the_template_alone_runs_no_worker_and_the_job_owns_its_workers_from_birth(objects, cluster, apis):
    core, apps, batch = apis
    template, job = one(objects, "PodTemplate"), one(objects, "Job")
    ns, name = template["metadata"]["namespace"], template["metadata"]["name"]
    workers_env = env(container(pod_spec(job), "worker-start"))
    assert workers_env["WORKER_REPLICASET"] == name

    # the manifests' workers, applied without a launcher: a template, no ReplicaSet, no pod
    core.create_namespaced_pod_template(ns, server_side(template))
    assert apps.list_namespaced_replica_set(ns).items == [] and live_pods(core, ns) == []

    # the launcher Job exists (its controller would start the launcher pod: here the test
    # runs the pod's worker-start, as the kubelet would)
    made_job = batch.create_namespaced_job(ns, server_side(job))
    labels = {**pod_labels(job), "batch.kubernetes.io/job-name": made_job.metadata.name,
              "batch.kubernetes.io/controller-uid": made_job.metadata.uid}
    first = worker_start(objects, labels, cluster.kubeconfig, ns, "--replicas=2")
    assert first.returncode == 0, first.stderr
    assert f"owned by jobs/{made_job.metadata.name} from its creation" in first.stderr

    rs = apps.read_namespaced_replica_set(name, ns)
    owners = [r.to_dict() for r in rs.metadata.owner_references]
    assert owners == [{"api_version": "batch/v1", "kind": "Job", "name": made_job.metadata.name,
                       "uid": made_job.metadata.uid, "controller": True, "block_owner_deletion": True}]
    assert rs.metadata.generation == 1 and rs.spec.replicas == 2  # made so, never patched
    assert rs.spec.selector.match_labels == template["template"]["metadata"]["labels"]
    wait_for(lambda: len(live_pods(core, ns)) == 2, 60, "the ReplicaSet's two workers")
    assert all(p.metadata.owner_references[0].uid == rs.metadata.uid for p in live_pods(core, ns))

    # a retry of the Job (its next launcher pod) keeps the workers, template and size
    again = worker_start(objects, labels, cluster.kubeconfig, ns, "--replicas=2")
    assert again.returncode == 0, again.stderr
    assert "is owned by this Job: kept as it is" in again.stderr
    assert apps.read_namespaced_replica_set(name, ns).metadata.uid == rs.metadata.uid

    # deleting the Job deletes its workers (the garbage collector's cascade)
    batch.delete_namespaced_job(made_job.metadata.name, ns)
    assert apps.list_namespaced_replica_set(ns).items == []
    wait_for(lambda: live_pods(core, ns) == [], 120, "the workers to be gone with their Job")


def test_workers_no_job_owns_are_refused_and_never_adopted(objects, cluster, apis):
    core, apps, batch = apis
    template, job = one(objects, "PodTemplate"), one(objects, "Job")
    ns, name = "hand-made", template["metadata"]["name"]
    core.create_namespaced_pod_template(ns, server_side(template))
    labels = template["template"]["metadata"]["labels"]
    apps.create_namespaced_replica_set(ns, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template["template"]}})
    made_job = batch.create_namespaced_job(ns, server_side(job))
    job_labels = {**pod_labels(job), "batch.kubernetes.io/job-name": made_job.metadata.name,
                  "batch.kubernetes.io/controller-uid": made_job.metadata.uid}
    proc = worker_start(objects, job_labels, cluster.kubeconfig, ns, "--replicas=2")
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: replicasets/{name} exists and no Job owns it") and "Traceback" not in proc.stderr
    rs = apps.read_namespaced_replica_set(name, ns)
    assert not rs.metadata.owner_references and rs.spec.replicas == 0
    # the Job's delete leaves what it does not own
    batch.delete_namespaced_job(made_job.metadata.name, ns)
    assert apps.read_namespaced_replica_set(name, ns).metadata.uid == rs.metadata.uid


def test_an_earlier_jobs_workers_are_waited_for_then_made_anew(objects, cluster, apis, tmp_path):
    """A delete and a re-apply at once: the earlier Job's ReplicaSet (owned by a uid that is
    gone) is still there when the new Job's worker-start runs. It waits for the garbage
    collector, then makes the new Job's own; when that takes longer than --start-timeout it
    fails in one line, exit 2."""
    core, apps, batch = apis
    template, job = one(objects, "PodTemplate"), one(objects, "Job")
    ns, name = "again", template["metadata"]["name"]
    core.create_namespaced_pod_template(ns, server_side(template))
    earlier = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "an-earlier-job",
               "controller": True, "blockOwnerDeletion": True}
    labels = template["template"]["metadata"]["labels"]
    old = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "ownerReferences": [earlier]},
           "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template["template"]}}
    apps.create_namespaced_replica_set(ns, old)
    made_job = batch.create_namespaced_job(ns, server_side(job))
    job_labels = {**pod_labels(job), "batch.kubernetes.io/job-name": made_job.metadata.name,
                  "batch.kubernetes.io/controller-uid": made_job.metadata.uid}

    late = worker_start(objects, job_labels, cluster.kubeconfig, ns, "--replicas=2", "--start-timeout=2")
    assert late.returncode == 2, late.stderr
    assert late.stderr.strip().splitlines()[-1].startswith(
        f"error: replicasets/{name} belongs to an earlier Job (uid an-earlier-job)")
    assert "still after 2 s (--start-timeout)" in late.stderr

    start = container(pod_spec(job), "worker-start")
    args = [expand(a, start, job_labels) for a in start["args"]]
    log = tmp_path / "worker-start.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, *args[1:], "--namespace", ns, "--kubeconfig",
                                 str(cluster.kubeconfig), "--start-timeout", "60", "--replicas=2"],
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        wait_for(lambda: "waiting until it is gone" in log.read_text(), 60, "worker-start to wait for the old set")
        apps.delete_namespaced_replica_set(name, ns)  # what the garbage collector does for the earlier Job
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        proc.kill()
    rs = apps.read_namespaced_replica_set(name, ns)
    assert [r.uid for r in rs.metadata.owner_references] == [made_job.metadata.uid] and rs.spec.replicas == 2
    batch.delete_namespaced_job(made_job.metadata.name, ns)
    wait_for(lambda: live_pods(core, ns) == [], 120, "the workers to be gone with their Job")


def test_the_leader_and_the_standby_starting_at_once_make_one_replicaset_and_both_go_on(objects, cluster, apis,
                                                                                        tmp_path):
    """deploy/ runs two launcher pods of one Job (a leader and a warm standby): their
    worker-starts run at the same moment. Both end 0; there is one ReplicaSet, the Job's,
    made once at --replicas and never patched: the one whose create came second (409
    AlreadyExists) or whose read came after the other's create keeps the Job's own."""
    core, apps, batch = apis
    template, job = one(objects, "PodTemplate"), one(objects, "Job")
    ns = "two-pods"
    core.create_namespaced_pod_template(ns, server_side(template))
    made_job = batch.create_namespaced_job(ns, server_side(job))
    labels = {**pod_labels(job), "batch.kubernetes.io/job-name": made_job.metadata.name,
              "batch.kubernetes.io/controller-uid": made_job.metadata.uid}
    start = container(pod_spec(job), "worker-start")
    args = [expand(a, start, labels) for a in start["args"]]
    logs = [tmp_path / f"worker-start-{i}.log" for i in range(2)]
    procs = []
    try:
        for log in logs:
            with open(log, "w") as err:
                procs.append(subprocess.Popen([sys.executable, *args[1:], "--namespace", ns, "--kubeconfig",
                                               str(cluster.kubeconfig), "--start-timeout", "60", "--replicas=2"],
                                              stdout=subprocess.DEVNULL, stderr=err, text=True))
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], texts
    made = [t for t in texts if f"owned by jobs/{made_job.metadata.name} from its creation" in t]
    kept = [t for t in texts if "is owned by this Job: kept as it is" in t]
    assert len(made) == 1 and len(kept) == 1, texts
    [rs] = apps.list_namespaced_replica_set(ns).items
    assert [r.uid for r in rs.metadata.owner_references] == [made_job.metadata.uid]
    assert rs.metadata.generation == 1 and rs.spec.replicas == 2
    batch.delete_namespaced_job(made_job.metadata.name, ns)
    wait_for(lambda: live_pods(core, ns) == [], 120, "the workers to be gone with their Job")


def test_the_launchers_failure_is_an_event_on_its_job_that_kubectl_describe_shows(objects, cluster, apis):
    """worker-scaler's stop records how the launcher ended on the Job (``failure_event``, through
    the official client's ``create_namespaced_event`` as its Role allows): the launcher's last
    line (its termination message: FallbackToLogsOnError) as a WorkersFailing Warning, shown by
    ``kubectl describe job``."""
    from elastic.scaler.scale_workers import Cluster, failure_event
    from shared.exitcodes import EXIT_WORKERS_FAILING

    core, _, batch = apis
    job = one(objects, "Job")
    ns = job["metadata"]["namespace"]
    made = batch.create_namespaced_job(ns, server_side({**job, "metadata": {**job["metadata"], "name": "failing"}}))
    read = Cluster(ns, str(cluster.kubeconfig))
    read.connect()
    reason = "elastic-run: the first world did not form in 60 s: worker-0 failing (CrashLoopBackOff)"
    pod = {"status": {"containerStatuses": [{"name": "launcher", "state": {"terminated": {
        "exitCode": EXIT_WORKERS_FAILING, "message": f"some output\n{reason}\n"}}}]}}
    event = failure_event(pod, "launcher", read.job("failing"), "2026-11-29T07:00:00Z", "0123abcd")
    assert event is not None
    read.record_event(event)
    mine = [e for e in core.list_namespaced_event(ns).items if e.involved_object.uid == made.metadata.uid]
    assert [(e.type, e.reason, e.message) for e in mine] == [
        ("Warning", "WorkersFailing", f"launcher exited {EXIT_WORKERS_FAILING}: {reason}")]
    described = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "describe", "job", "failing",
                                "-n", ns], capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    assert "WorkersFailing" in described.stdout and "worker-0 failing (CrashLoopBackOff)" in described.stdout
    batch.delete_namespaced_job("failing", ns)
