"""The job as it runs: a launcher Job that retries sensibly and frees the workers at the end,
workers that leave within their grace period, Guaranteed QoS (a Burstable daemon), a budget
that keeps the floor, no `replicas` that a re-apply
would reset, and two jobs (namePrefix overlays) in one namespace that never mix."""
import shutil
import textwrap

import pytest

from shared.exitcodes import EXIT_NO_CAPACITY, EXIT_WORKERS_FAILING
from tests.deploy.render import (
    DEPLOY,
    JOB_UID,
    all_containers,
    by_kind,
    container,
    env,
    expand,
    flag,
    one,
    parse_selector,
    pod_labels,
    pod_spec,
    render,
    worker_set,
)

JOB_LABEL = "elastic-horovod/job"


@pytest.fixture(scope="module")
def objects() -> list:
    return render(DEPLOY)


def test_the_launcher_is_a_job_with_an_exit_status_and_retries(objects):
    job = one(objects, "Job")
    spec = job["spec"]
    assert spec["backoffLimit"] >= 1
    assert spec["ttlSecondsAfterFinished"] > 0
    assert pod_spec(job)["restartPolicy"] == "Never"  # podFailurePolicy needs it
    rules = spec["podFailurePolicy"]["rules"]
    assert {"action": "FailJob", "onExitCodes": {"containerName": "launcher", "operator": "In",
                                                 "values": [2]}} in rules  # bad input: no retry
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
    assert not by_kind(objects, "Pod")


def test_a_job_without_capacity_for_its_first_world_frees_its_workers_and_tries_again(objects):
    """Two jobs on a capped pool: no world of --min-np slots within
    --first-world-timeout is exit 75; the Job ignores that failure (a retry that counts against
    nothing) and worker-scaler frees the workers on it (tests/e2e/test_capped_pool.py)."""
    job = one(objects, "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onExitCodes": {"containerName": "launcher", "operator": "In",
                                                "values": [EXIT_NO_CAPACITY]}} in rules
    launcher = container(pod_spec(job), "launcher")
    first_world = float(flag(launcher["args"], "--first-world-timeout"))
    # long enough for a cold node scale-up's usual case, far below the hour of --elastic-timeout
    assert 300 <= first_world < float(flag(launcher["args"], "--elastic-timeout")) / 2


def test_failing_workers_are_counted_and_the_ignored_retries_end_at_a_deadline(objects):
    """Exit 75 is ignored, so only activeDeadlineSeconds bounds a job that never gets its
    places; failing workers (69) are a counted failure: no rule ignores them, and a placed
    worker is judged failing well before the first-world deadline (elastic.launch.shortfall)."""
    job = one(objects, "Job")
    assert 86400 <= job["spec"]["activeDeadlineSeconds"] <= 30 * 86400
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        assert EXIT_WORKERS_FAILING not in rule.get("onExitCodes", {}).get("values", []), rule
    launcher = container(pod_spec(job), "launcher")
    assert 0 < float(flag(launcher["args"], "--ready-timeout")) < float(flag(launcher["args"], "--first-world-timeout"))


@pytest.mark.parametrize("overlay", sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir()))
def test_no_overlay_makes_a_pod_but_through_the_job(overlay):
    """Every overlay as shipped: the Job is the only object that makes pods, and the workers'
    template is its worker-start's, so no worker (and no GPU) runs without the Job owning it."""
    objects = render(DEPLOY / "overlays" / overlay)
    assert {o["kind"] for o in objects} & {"ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Pod",
                                            "ReplicationController", "CronJob"} == set()
    [job] = [o for o in objects if o["kind"] == "Job"]
    [template] = [o for o in objects if o["kind"] == "PodTemplate"]
    start = container(pod_spec(job), "worker-start")
    args = [expand(a, start, pod_labels(job)) for a in start["args"]]
    assert flag(args, "--template") == template["metadata"]["name"]
    assert flag(args, "--job") == job["metadata"]["name"]

def test_the_launcher_waits_long_enough_for_workers(objects):
    """A cold pull of a multi-GB image or a GPU node scale-up takes longer than 600 s."""
    launcher = container(pod_spec(one(objects, "Job")), "launcher")
    assert int(flag(launcher["args"], "--elastic-timeout")) >= 1800


def test_the_scaler_starts_first_then_waits_as_a_sidecar_and_the_manifests_hold_no_workers(objects):
    """worker-start is a regular init container before every other (its failure fails the pod,
    and exit 2 the Job); it makes the workers' ReplicaSet from the PodTemplate, owned by the Job
    (--template, --job); worker-scaler is a native sidecar; both size that ReplicaSet. The
    manifests hold nothing that makes a pod but the Job: applying them without the launcher
    runs no worker, and a re-apply never touches the workers' size or template."""
    workers = worker_set(objects)
    assert {o["kind"] for o in objects} & {"ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Pod",
                                            "ReplicationController", "CronJob"} == set()
    job = one(objects, "Job")
    inits = pod_spec(job)["initContainers"]
    assert inits[0]["name"] == "worker-start" and "restartPolicy" not in inits[0]
    scaler = container(pod_spec(job), "worker-scaler")
    assert scaler["restartPolicy"] == "Always"
    for c, phase in ((inits[0], "start"), (scaler, "stop")):
        args = [expand(a, c, pod_labels(job)) for a in c["args"]]
        assert flag(args, "--phase") == phase
        assert flag(args, "--workers") == "replicasets/" + workers["metadata"]["name"]
        assert flag(args, "--job") == job["metadata"]["name"]
    start = [expand(a, inits[0], pod_labels(job)) for a in inits[0]["args"]]
    assert flag(start, "--template") == one(objects, "PodTemplate")["metadata"]["name"]
    assert workers["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": JOB_UID,
        "controller": True, "blockOwnerDeletion": True}]
    assert flag(scaler["args"], "--container") == "launcher"
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "FailJob", "onExitCodes": {"containerName": "worker-start", "operator": "In",
                                                 "values": [2]}} in rules


def test_workers_get_longer_than_the_training_needs_to_leave(objects):
    job = one(objects, "Job")
    launcher = container(pod_spec(job), "launcher")
    term_grace = float(flag(launcher["args"][launcher["args"].index("--"):], "--term-grace"))
    assert pod_spec(worker_set(objects))["terminationGracePeriodSeconds"] >= term_grace + 10


def test_workers_are_guaranteed_qos_and_the_launcher_container_too(objects):
    """Requests = limits for the workers and every launcher-pod container but the daemon
    (Burstable: test_the_daemon_sidecar_is_burstable...)."""
    for obj in (worker_set(objects), one(objects, "Job")):
        for c in all_containers(pod_spec(obj)):
            res = c["resources"]
            assert {"cpu", "memory"} <= res["limits"].keys()
            if c["name"] != "discovery-daemon":
                assert res["requests"] == res["limits"], f"{obj['kind']}/{c['name']}"


def cpu(value: str) -> float:
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def mebibytes(value: str) -> int:
    return int(value[:-2]) * (1024 if value.endswith("Gi") else 1)


def test_the_daemon_sidecar_is_burstable_with_room_for_the_dataset_syncs(objects):
    """It reserves the idle daemon for the run, and may burst to 2 CPUs / 2 GiB while the
    prepare hook's ssh and rsync run (it once reserved 2 CPU / 2 Gi throughout)."""
    res = container(pod_spec(one(objects, "Job")), "discovery-daemon")["resources"]
    assert cpu(res["limits"]["cpu"]) >= 2 and mebibytes(res["limits"]["memory"]) >= 2048
    assert cpu(res["requests"]["cpu"]) <= 0.25 and mebibytes(res["requests"]["memory"]) <= 512


def test_the_disruption_budget_keeps_the_floor_and_lets_pending_workers_go(objects):
    """minAvailable = the scaler's floor, not maxUnavailable: Pending workers (waiting for
    capacity) do not use the budget up, so drains, upgrades and Spot drains pass while the job
    keeps --min-np."""
    pdb = one(objects, "PodDisruptionBudget")
    assert "maxUnavailable" not in pdb["spec"]
    scaler = container(pod_spec(one(objects, "Job")), "worker-scaler")
    assert pdb["spec"]["minAvailable"] == int(flag(scaler["args"], "--min-replicas"))
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(worker_set(objects)).items()
    # the disruption controller's arithmetic: allowed = healthy - minAvailable, and with
    # maxUnavailable = desired - maxUnavailable; 8 desired, 5 Ready, 3 Pending:
    desired, healthy = 8, 5
    assert healthy - pdb["spec"]["minAvailable"] == 3
    assert healthy - (desired - 1) < 0  # what maxUnavailable: 1 allowed: no eviction at all


def test_the_job_label_is_in_every_selector(objects):
    value = pod_labels(one(objects, "Job"))[JOB_LABEL]
    for obj in objects:
        selector = obj["spec"].get("selector") if "spec" in obj else None
        if obj["kind"] == "PodDisruptionBudget":
            assert selector["matchLabels"][JOB_LABEL] == value, obj["kind"]
    assert worker_set(objects)["spec"]["selector"]["matchLabels"][JOB_LABEL] == value
    job = one(objects, "Job")
    daemon = container(pod_spec(job), "discovery-daemon")
    assert parse_selector(expand(env(daemon)["DISCOVERY_SELECTOR"], daemon, pod_labels(job)))[JOB_LABEL] == value


def selects(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


def selectors(objects) -> dict:
    """Every pod selector of a job, by what holds it."""
    job = one(objects, "Job")
    daemon = container(pod_spec(job), "discovery-daemon")
    return {
        "daemon": parse_selector(expand(env(daemon)["DISCOVERY_SELECTOR"], daemon, pod_labels(job))),
        "replicaset": worker_set(objects)["spec"]["selector"]["matchLabels"],
        "pdb": one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    }


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory) -> tuple:
    """The example overlay and a second namePrefix overlay, as two users would write them."""
    other = tmp_path_factory.mktemp("overlays") / "other"
    other.mkdir()
    shutil.copytree(DEPLOY / "job", other.parent / "job")
    (other / "kustomization.yaml").write_text(textwrap.dedent("""\
        resources: [../job]
        namePrefix: other-
        labels:
          - pairs: {elastic-horovod/job: other}
            includeSelectors: true
        """))
    return render(DEPLOY / "overlays" / "example"), render(other)


def test_two_prefixed_jobs_share_no_object_and_select_only_their_own_pods(two_jobs):
    a, b = two_jobs
    def names(objs):
        return {(o["kind"], o["metadata"]["name"]) for o in objs}

    assert not names(a) & names(b)
    for mine, theirs in ((a, b), (b, a)):
        my_workers = pod_labels(worker_set(mine))
        their_pods = [pod_labels(worker_set(theirs)), pod_labels(one(theirs, "Job"))]
        for holder, selector in selectors(mine).items():
            assert selects(selector, my_workers), holder
            assert not any(selects(selector, pod) for pod in their_pods), f"{holder} selects the other job's pods"


def test_a_prefixed_job_scales_only_its_own_workers(two_jobs):
    for objs in two_jobs:
        sts = worker_set(objs)["metadata"]["name"]
        role = next(r for r in by_kind(objs, "Role") if any("replicasets/scale" in rule["resources"]
                                                              for rule in r["rules"]))
        named = [rule["resourceNames"] for rule in role["rules"]
                 if {"podtemplates", "replicasets", "replicasets/scale"} & set(rule["resources"])
                 and "resourceNames" in rule]
        assert len(named) == 3 and all(names == [sts] for names in named)
        job = one(objs, "Job")
        scaler = container(pod_spec(job), "worker-scaler")
        assert flag([expand(x, scaler, pod_labels(job)) for x in scaler["args"]], "--workers") == "replicasets/" + sts
        # the checkpoints of two jobs go to different directories of the shared claim
        launcher = container(pod_spec(job), "launcher")
        ckpt = flag([expand(x, launcher, pod_labels(job)) for x in launcher["args"]], "--checkpoint-dir")
        assert ckpt.startswith("/checkpoints/" + pod_labels(job)[JOB_LABEL] + "/")


def test_the_example_overlay_sets_the_image_and_the_job_name(two_jobs):
    example = two_jobs[0]
    job = one(example, "Job")
    assert job["metadata"]["name"].startswith("resnet-")
    assert pod_labels(job)[JOB_LABEL] == "resnet"
    base_images = {c["image"] for o in render(DEPLOY) if o["kind"] in ("Job", "PodTemplate")
                   for c in all_containers(pod_spec(o))}
    images = {c["image"] for o in example if o["kind"] in ("Job", "PodTemplate")
              for c in all_containers(pod_spec(o))}
    assert len(images) == 1 and not images & base_images


def test_the_scaler_decides_within_the_launcher_pods_grace(objects):
    """After SIGTERM the scaler reads the pod and the Job and scales to zero, with retries,
    within --finish-timeout. A native sidecar gets SIGTERM only once the launcher container
    has ended, with what is left of the pod's grace: the launcher's --term-grace (and 10 s to
    exit) plus the scaler's --finish-timeout (and 5 s) fit in it, so the kubelet's SIGKILL
    never cuts the final scale short."""
    from elastic.scaler.scale_workers import parse_args as scaler_args

    job = one(objects, "Job")
    scaler = container(pod_spec(job), "worker-scaler")
    argv = [expand(a, scaler, pod_labels(job)) for a in scaler["args"]][3:]
    args = scaler_args([a.replace("$(POD_NAME)", "p") for a in argv])
    launcher = container(pod_spec(job), "launcher")
    term_grace = float(flag(launcher["args"][:launcher["args"].index("--")], "--term-grace"))
    assert term_grace + 10 + args.finish_timeout + 5 <= pod_spec(job)["terminationGracePeriodSeconds"]


def test_the_launcher_is_sized_by_the_formula_for_its_max_np(objects):
    """deploy/README.md, "Sizing the launcher": cpu 1000m + 2m x N, memory 1024Mi + 8Mi x N for
    --max-np N (Horovod patch 0102: one ssh client, 8 MB RSS, per worker on the launcher)."""
    launcher = container(pod_spec(one(objects, "Job")), "launcher")
    n = int(flag(launcher["args"], "--max-np"))
    for kind in ("requests", "limits"):
        res = launcher["resources"][kind]
        assert res["cpu"] == f"{1000 + 2 * n}m", (kind, res)
        assert res["memory"] == f"{1024 + 8 * n}Mi", (kind, res)
