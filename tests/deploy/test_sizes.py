"""Every rendering a user applies (deploy/, the example, the 8-GPU, the Spot, the ImageNet and
the ImageNet 8-GPU overlays): the job asks for what --max-np needs and keeps its floor through
drains, workers whose loss is cheap, pools picked by labels that exist at node creation, the
architecture pinned, the launcher kept from consolidation and GPU nodes, the 8-GPU layout,
Spot's grace."""
import shutil
import textwrap

import kubernetes_validate
import pytest

from tests.deploy.render import (
    DEPLOY,
    all_containers,
    by_kind,
    container,
    flag,
    one,
    pod_spec,
    quantity,
    render,
    worker_set,
)

RENDERINGS = {"deploy": DEPLOY, "example": DEPLOY / "overlays" / "example",
              "gpu8": DEPLOY / "overlays" / "gpu8", "spot": DEPLOY / "overlays" / "spot",
              "imagenet": DEPLOY / "overlays" / "imagenet",
              "imagenet-gpu8": DEPLOY / "overlays" / "imagenet-gpu8"}
# memory the launcher container holds besides the formula: the ImageNet overlays' elastic-run
# syncs the hosts served at its start itself, one dataset-sync with a 1.28 M-file manifest
DATASET_MEMORY_MI = {"imagenet": 3072, "imagenet-gpu8": 3072}


@pytest.fixture(scope="module", params=sorted(RENDERINGS))
def objects(request) -> list:
    return render(RENDERINGS[request.param])


@pytest.fixture(scope="module")
def gpu8() -> list:
    return render(RENDERINGS["gpu8"])


@pytest.fixture(scope="module")
def spot() -> list:
    return render(RENDERINGS["spot"])


def training_flag(launcher: dict, name: str) -> str:
    return flag(launcher["args"][launcher["args"].index("--"):], name)


def gpus_per_worker(objects) -> int:
    return int(container(pod_spec(worker_set(objects)), "worker")["resources"]["limits"]["nvidia.com/gpu"])


def test_the_scaler_asks_for_what_max_np_needs_and_the_budget_keeps_what_min_np_needs(objects):
    """--replicas x GPUs = --max-np (the job grows to it by itself), --min-replicas x GPUs =
    --min-np = the PodDisruptionBudget's minAvailable x GPUs; the start and the stop phases
    agree."""
    spec = pod_spec(one(objects, "Job"))
    launcher = container(spec, "launcher")
    gpus = gpus_per_worker(objects)
    start, sidecar = container(spec, "worker-start"), container(spec, "worker-scaler")
    for name in ("--workers", "--min-replicas", "--replicas", "--job"):
        assert flag(start["args"], name) == flag(sidecar["args"], name), name
    assert int(flag(start["args"], "--replicas")) * gpus == int(flag(launcher["args"], "--max-np"))
    assert int(flag(start["args"], "--min-replicas")) * gpus == int(flag(launcher["args"], "--min-np"))
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == int(flag(start["args"], "--min-replicas"))


def test_the_launcher_is_sized_for_its_max_np(objects, request):
    """deploy/README.md, "Sizing the launcher", in every rendering (the 8-GPU one has N = 32;
    the ImageNet one holds a dataset-sync besides)."""
    launcher = container(pod_spec(one(objects, "Job")), "launcher")
    n = int(flag(launcher["args"], "--max-np"))
    extra = DATASET_MEMORY_MI.get(request.node.callspec.params["objects"], 0)
    for kind in ("requests", "limits"):
        res = launcher["resources"][kind]
        assert (res["cpu"], res["memory"]) == (f"{1000 + 2 * n}m", f"{1024 + 8 * n + extra}Mi"), kind


def test_workers_leave_within_their_grace(objects):
    launcher = container(pod_spec(one(objects, "Job")), "launcher")
    grace = pod_spec(worker_set(objects))["terminationGracePeriodSeconds"]
    assert grace >= float(training_flag(launcher, "--term-grace")) + 10


def test_workers_are_a_replicaset_whose_loss_is_cheap(objects):
    """Not a StatefulSet (ordinal scale-down, one Terminating identity on a NotReady node, a
    rolling update on re-apply) nor a Deployment (rolls the workers on a re-apply): a
    ReplicaSet never replaces running pods when its template changes. worker-start makes it
    at the size --max-np needs."""
    assert not by_kind(objects, "StatefulSet") and not by_kind(objects, "Deployment")
    workers = worker_set(objects)
    assert workers["kind"] == "ReplicaSet" and workers["spec"]["replicas"] >= 1


def test_no_worker_selects_a_label_only_gpu_feature_discovery_writes(objects):
    """The nvidia.com/gpu request confines workers to GPU nodes; nvidia.com/gpu.present is on no
    GKE managed-driver node, no plain-device-plugin EKS node and no autoscaler template node."""
    spec = pod_spec(worker_set(objects))
    assert "nvidia.com/gpu.present" not in spec.get("nodeSelector", {})
    assert "nvidia.com/gpu.present" not in str(spec.get("affinity", {}))


def test_the_architecture_is_pinned_in_every_pod(objects):
    """An image built for amd64 on an arm64 node fails with `exec format error`."""
    for obj in (worker_set(objects), one(objects, "Job")):
        assert pod_spec(obj)["nodeSelector"]["kubernetes.io/arch"] == "amd64", obj["kind"]
    assert "docker build --platform linux/amd64" in (DEPLOY / "README.md").read_text()


def test_the_launcher_is_kept_from_consolidation_gpu_nodes_and_spot(objects):
    """Consolidation moving the launcher restarts the world; an untainted GPU node
    without GPU Feature Discovery's label (EKS, Karpenter) must still repel it."""
    job = one(objects, "Job")
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert annotations["karpenter.sh/do-not-disrupt"] == "true"
    affinity = pod_spec(job)["affinity"]["nodeAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for e in term["matchExpressions"]}
    assert {"nvidia.com/gpu.present", "cloud.google.com/gke-accelerator", "karpenter.k8s.aws/instance-gpu-count",
            "k8s.amazonaws.com/accelerator"} <= keys
    preferred = {e["key"] for p in affinity["preferredDuringSchedulingIgnoredDuringExecution"]
                 for e in p["preference"]["matchExpressions"]}
    assert {"cloud.google.com/gke-spot", "karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType"} <= preferred
    assert "tolerations" not in pod_spec(job)


def test_the_8_gpu_layout_is_one_worker_per_node_with_all_its_gpus(gpu8):
    """8 ranks in one pod (NCCL over NVLink/shared memory), one /data per node."""
    spec = pod_spec(worker_set(gpu8))
    res = container(spec, "worker")["resources"]
    assert res["limits"]["nvidia.com/gpu"] == res["requests"]["nvidia.com/gpu"] == "8"
    assert res["limits"]["ephemeral-storage"] == "60Gi"  # one dataset copy, not eight
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
    assert shm == "64Gi"
    base = pod_spec(worker_set(render(DEPLOY)))
    assert next(v for v in base["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "8Gi"


def test_spot_workers_leave_within_a_gke_spot_notice(spot):
    """GKE gives non-system pods ~15 s of a Spot reclaim; the training's --term-grace
    fits in it with 10 s to spare; the launcher gets no Spot toleration."""
    launcher = container(pod_spec(one(spot, "Job")), "launcher")
    workers = pod_spec(worker_set(spot))
    assert workers["terminationGracePeriodSeconds"] <= 15
    assert float(training_flag(launcher, "--term-grace")) + 10 <= workers["terminationGracePeriodSeconds"]
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
            "effect": "NoSchedule"} in workers["tolerations"]
    assert "tolerations" not in pod_spec(one(spot, "Job"))


def test_spot_finds_the_training_grace_by_value_in_an_overlay_that_moves_the_arguments(tmp_path):
    """An overlay of the user's that adds flags to elastic-run (here two, before the others:
    every argument moves) and the Spot component: the training's --term-grace is still found
    and shortened, elastic-run's own is left alone. A patch by position would shorten another
    argument or fail the rendering."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    moved, overlay = tmp_path / "deploy" / "overlays" / "moved", tmp_path / "deploy" / "overlays" / "mine"
    moved.mkdir()
    (moved / "kustomization.yaml").write_text(textwrap.dedent("""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [../../job]
        patches:
          - target: {kind: Job, name: elastic-horovod-launcher}
            patch: |-
              - {op: add, path: /spec/template/spec/containers/0/args/3, value: --verbose}
              - {op: add, path: /spec/template/spec/containers/0/args/3, value: --reset-limit=100}
        """))
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(textwrap.dedent("""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [../moved]
        components: [../../components/gpu-pool, ../../components/spot]
        """))
    objects = render(overlay)
    launcher = container(pod_spec(one(objects, "Job")), "launcher")
    assert {"--verbose", "--reset-limit=100"} <= set(launcher["args"])
    assert training_flag(launcher, "--term-grace") == "5"
    base = container(pod_spec(one(render(DEPLOY), "Job")), "launcher")["args"]
    assert flag(launcher["args"][:launcher["args"].index("--")], "--term-grace") == \
        flag(base[:base.index("--")], "--term-grace")


def test_the_egress_example_reaches_cloud_identity_and_object_stores_only_from_its_pods(tmp_path):
    """An egress example for a default-deny namespace (metadata and Pod Identity
    endpoints, HTTPS to public addresses, not to the cluster's private ranges), added to an
    overlay of a user's own as the component's comment says."""
    shutil.copytree(DEPLOY / "job", tmp_path / "job")
    shutil.copytree(DEPLOY / "components", tmp_path / "components")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "kustomization.yaml").write_text(textwrap.dedent("""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [../job]
        components: [../components/egress-cloud]
        labels:
          - pairs: {elastic-horovod/job: mine}
            includeSelectors: true
        """))
    policy = one(render(tmp_path / "mine"), "NetworkPolicy", "elastic-horovod-egress-cloud")
    assert policy["spec"]["podSelector"]["matchLabels"]["elastic-horovod/job"] == "mine"
    blocks = [p["ipBlock"] for rule in policy["spec"]["egress"] for p in rule["to"]]
    assert {"cidr": "169.254.169.254/32"} in blocks and {"cidr": "169.254.170.23/32"} in blocks
    public = next(b for b in blocks if b["cidr"] == "0.0.0.0/0")
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(public["except"])
    https = next(rule for rule in policy["spec"]["egress"] if {"ipBlock": public} in rule["to"])
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]
    for version in ("1.29.0", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(policy, version, strict=True)


def test_every_container_asks_for_what_the_autoscaler_needs_to_scale_from_zero(objects):
    """The workers' ephemeral-storage request needs a node-template tag on AWS groups
    scaled from zero (autoscaler #1869); the README says so."""
    text = (DEPLOY / "README.md").read_text()
    assert "k8s.io/cluster-autoscaler/node-template/resources/ephemeral-storage" in text
    for obj in (worker_set(objects), one(objects, "Job")):
        for c in all_containers(pod_spec(obj)):
            assert "ephemeral-storage" in c["resources"]["requests"], c["name"]


# the smallest common 8-GPU nodes: (vCPUs, GiB of memory)
SMALL_8_GPU_NODES = {"p3.16xlarge": (64, 488), "g4dn.metal": (96, 384), "a2-highgpu-8g": (96, 633)}


def test_the_8_gpu_worker_fits_the_smallest_8_gpu_nodes_and_uses_a_larger_ones_cpus(gpu8):
    """Requests within what the smallest common 8-GPU nodes have after their reservations
    (about 2 vCPUs and 5 % of the memory, DaemonSets included); no CPU limit, so a 192-vCPU
    node's idle cores feed the loaders; memory requests = limits (evicted last)."""
    res = container(pod_spec(worker_set(gpu8)), "worker")["resources"]
    assert "cpu" not in res["limits"]
    # the gpu-pool component's toleration is added to the base's, not instead of them
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        pod_spec(worker_set(gpu8))["tolerations"]
    assert res["requests"]["memory"] == res["limits"]["memory"]
    for node, (cpus, memory) in SMALL_8_GPU_NODES.items():
        assert float(res["requests"]["cpu"]) <= cpus - 4, node
        assert quantity(res["requests"]["memory"]) / 2**30 <= memory * 0.9, node


def test_workers_on_a_lost_node_are_replaced_within_a_minute_in_every_rendering(objects):
    """The API's default NotReady/unreachable tolerations evict after 300 s: a worker's
    replacement waits that long. The workers tolerate 30 s, and overlays add their own
    tolerations after these instead of replacing them."""
    tolerations = pod_spec(worker_set(objects))["tolerations"]
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        (mine,) = [t for t in tolerations if t["key"] == key]
        assert mine == {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}


def test_workers_are_kept_from_karpenter_consolidation_in_every_rendering(objects):
    """A consolidation moving a worker costs a reset and a dataset copy: do-not-disrupt."""
    template = worker_set(objects)["spec"]["template"]  # as worker-start makes it
    assert template["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
