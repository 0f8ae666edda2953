"""deploy/overlays/imagenet-gpu8/: the ImageNet job on 8-GPU nodes. One worker per node with
8 GPUs, which the daemon serves as one host of 8 slots; sized for 8 ResNet-50 ranks on
ImageNet and for the nodes deploy/README.md names; the ImageNet overlay's flags, dataset
setting and node-local cache kept; nothing of the base lost (deploy/README.md, "ImageNet on
8-GPU nodes")."""
import copy
import shutil

import pytest
import yaml

from tests.deploy.render import (
    DEPLOY,
    JOB_UID,
    by_kind,
    config_maps,
    container,
    env,
    flag,
    one,
    pod_labels,
    pod_spec,
    quantity,
    render,
    worker_set,
)
from tests.deploy.test_imagenet import expanded

OVERLAY = DEPLOY / "overlays" / "imagenet-gpu8"
GIB = 2**30
# what the gpu-8 component and this overlay mean to change in the ImageNet overlay's Job
SIZES = {"launcher": {"--min-np": "16", "--max-np": "32"},
         "worker-start": {"--replicas": "4"}, "worker-scaler": {"--replicas": "4"}}
# the 8-GPU nodes the README names: (vCPUs, GiB of memory)
NODES = {"p4d.24xlarge": (96, 1152), "a2-highgpu-8g": (96, 633), "ND96asr_v4": (96, 900),
         "p5.48xlarge": (192, 2048), "a3-highgpu-8g": (208, 1743)}


@pytest.fixture(scope="module")
def objects() -> list:
    return render(OVERLAY)


@pytest.fixture(scope="module")
def imagenet() -> list:
    return render(DEPLOY / "overlays" / "imagenet")


def worker(objects: list) -> dict:
    return container(pod_spec(worker_set(objects)), "worker")


def test_each_worker_is_one_host_of_8_slots_with_8_gpus(objects, monkeypatch):
    """The daemon, as the rendered sidecar runs it, serves a Running and Ready worker made
    from the rendered template as one host with 8 slots: horovodrun starts 8 ranks in it."""
    from discovery.cli import build_parser
    from discovery.hosts import Rules, pods_to_hosts

    res = worker(objects)["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "8"
    workers = worker_set(objects)
    template = workers["spec"]["template"]
    pod = {"metadata": {**template["metadata"], "name": "elastic-horovod-worker-x7k2p", "uid": "u-1",
                        "namespace": workers["metadata"]["namespace"],
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {**template["spec"], "nodeName": "gpu-node-1"},
           "status": {"phase": "Running", "podIP": "10.4.0.7",
                      "conditions": [{"type": "Ready", "status": "True"}]}}
    job = one(objects, "Job")
    daemon = container(pod_spec(job), "discovery-daemon")
    monkeypatch.setenv("DISCOVERY_SELECTOR", "app=elastic-horovod")
    args = build_parser().parse_args(daemon["args"][1:])
    rules = Rules(default_slots=int(args.default_slots), address=args.address)
    assert [h.line() for h in pods_to_hosts([pod], rules).hosts] == ["10.4.0.7:8"]
    # 2 to 4 such hosts: --min-np / --max-np ranks, the budget keeps the floor
    launcher = container(pod_spec(job), "launcher")
    start = container(pod_spec(job), "worker-start")
    assert int(flag(start["args"], "--replicas")) * 8 == int(flag(launcher["args"], "--max-np")) == 32
    assert int(flag(start["args"], "--min-replicas")) * 8 == int(flag(launcher["args"], "--min-np")) == 16
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 2


def test_the_imagenet_overlays_flags_are_kept_but_the_8_gpu_sizes(objects, imagenet):
    """Every container of the launcher pod runs the ImageNet overlay's arguments, in its
    order, but for --min-np/--max-np and --replicas; the training is ResNet-50's, with the
    flags its parser takes, and the ones scripts/gpu-smoke reads from the ImageNet overlay's
    kustomization (training.deploy_flags)."""
    import training.resnet50 as resnet50
    from elastic.launch.cli import _split, build_parser
    from training.options import parse

    mine, theirs = pod_spec(one(objects, "Job")), pod_spec(one(imagenet, "Job"))
    assert [c["name"] for c in (mine.get("initContainers", []) + mine["containers"])] == \
        [c["name"] for c in (theirs.get("initContainers", []) + theirs["containers"])]
    for name in ("worker-start", "worker-scaler", "discovery-daemon", "launcher"):
        args, want = container(mine, name)["args"], list(container(theirs, name)["args"])
        for i, arg in enumerate(want):
            key = arg.split("=", 1)[0]
            if key in SIZES.get(name, {}) and "--" not in want[:i]:
                want[i] = f"{key}={SIZES[name][key]}"
        assert args == want, name
        for field in ("env", "envFrom", "volumeMounts"):
            assert container(mine, name).get(field) == container(theirs, name).get(field), (name, field)
    launcher = expanded(objects, "launcher")
    own, command = _split(launcher[1:])
    build_parser().parse_args(own)
    assert command[:3] == ["python", "-m", "training.resnet50"]
    trained = parse(command[3:], resnet50.DEFAULTS)
    assert trained.data_dir == config_maps(objects)["elastic-horovod-dataset"]["DATASET_DEST"]


def test_gpu_smoke_reads_the_flags_this_overlay_trains_with(objects, tmp_path):
    """training.deploy_flags reads ResNet-50's flags from the ImageNet overlay's inline patch;
    this overlay restates no argument list, so they are the flags its Job renders."""
    from training.deploy_flags import training_flags

    rendered = tmp_path / "job.yaml"
    rendered.write_text(yaml.safe_dump(one(objects, "Job")))
    read = training_flags(DEPLOY / "overlays" / "imagenet" / "kustomization.yaml", tmp_path / "root")
    assert training_flags(rendered, tmp_path / "root") == read


def _with_own_dataset_setting(tmp_path, source: str, dest: str):
    """A copy of deploy/ whose 8-GPU ImageNet overlay has its configMapGenerator uncommented
    (as its comment says) with paths of its own."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    path = tmp_path / "deploy" / "overlays" / "imagenet-gpu8" / "kustomization.yaml"
    lines = path.read_text().splitlines()
    start = lines.index("# configMapGenerator:")
    end = lines.index("patches:")
    block = [line[2:] for line in lines[start:end]]
    block = [line.replace("/datasets/imagenet", source).replace("/data/imagenet", dest) for line in block]
    path.write_text("\n".join(lines[:start] + block + lines[end:]) + "\n")
    return tmp_path / "deploy"


def test_the_dataset_paths_are_a_setting_of_their_own(objects, tmp_path):
    """Rendered as shipped, the ImageNet overlay's ConfigMap; with the overlay's own
    configMapGenerator, its paths reach the daemon's --prepare-cmd, elastic-run's --dataset and
    the training's --data-dir, and are written in no argument; the ImageNet overlay keeps its."""
    import shlex

    assert config_maps(objects)["elastic-horovod-dataset"] == {
        "DATASET_SOURCE": "/datasets/imagenet", "DATASET_DEST": "/data/imagenet"}
    deploy = _with_own_dataset_setting(tmp_path, "/datasets/in1k-2012", "/data/in1k-2012")
    mine = render(deploy / "overlays" / "imagenet-gpu8")
    assert config_maps(mine)["elastic-horovod-dataset"] == {
        "DATASET_SOURCE": "/datasets/in1k-2012", "DATASET_DEST": "/data/in1k-2012"}
    prepare = shlex.split(flag(expanded(mine, "discovery-daemon"), "--prepare-cmd"))
    assert prepare[prepare.index("--dataset") + 1] == "/datasets/in1k-2012:/data/in1k-2012"
    launcher = expanded(mine, "launcher")
    split = launcher.index("--")
    assert flag(launcher[:split], "--dataset") == "/datasets/in1k-2012:/data/in1k-2012"
    assert flag(launcher[split:], "--data-dir") == "/data/in1k-2012"
    assert "in1k" not in str([c.get("args") for c in (pod_spec(one(mine, "Job"))["containers"])])
    theirs = render(deploy / "overlays" / "imagenet")
    assert config_maps(theirs)["elastic-horovod-dataset"]["DATASET_DEST"] == "/data/imagenet"


def _as_8_gpu(obj: dict, objects: list) -> dict:
    """An object of the ImageNet overlay's rendering with this overlay's sizes put in (taken
    from its rendering), all else left as it was."""
    obj = copy.deepcopy(obj)
    if obj["kind"] == "PodTemplate":
        spec = obj["template"]["spec"]
        container(spec, "worker")["resources"] = worker(objects)["resources"]
        shm = next(v for v in pod_spec(one(objects, "PodTemplate"))["volumes"] if v["name"] == "dshm")
        next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"] = shm["emptyDir"]
    if obj["kind"] == "Job":
        spec = pod_spec(obj)
        for name, sizes in SIZES.items():
            args = container(spec, name)["args"]
            for i, arg in enumerate(args[:args.index("--") if "--" in args else len(args)]):
                key = arg.split("=", 1)[0]
                if key in sizes:
                    args[i] = f"{key}={sizes[key]}"
        launcher = container(pod_spec(one(objects, "Job")), "launcher")
        container(spec, "launcher")["resources"] = launcher["resources"]
    return obj


def _key(obj: dict) -> tuple:
    return obj["kind"], obj["metadata"]["name"]


def test_nothing_but_the_sizes_differs_from_the_imagenet_overlay(objects, imagenet):
    """The same objects; the RBAC, NetworkPolicies, ServiceAccounts, the budget and every
    field of the workers' template and the Job equal to the ImageNet overlay's but for the
    8-GPU sizes (its own tests hold it to the base's)."""
    assert sorted(map(_key, objects)) == sorted(map(_key, imagenet))
    theirs = {_key(o): o for o in imagenet}
    for obj in objects:
        assert obj == _as_8_gpu(theirs[_key(obj)], objects), f"{_key(obj)} differs beyond the 8-GPU sizes"


def test_the_workers_are_owned_by_the_job_and_the_launcher_may_make_and_scale_them(objects):
    """What the base promises, in this rendering: its RBAC, ServiceAccounts and
    NetworkPolicies unchanged; worker-start makes the ReplicaSet from the template with the
    Job as its controlling owner (blockOwnerDeletion: the Role's update of the Job's
    finalizers); the Role allows that ReplicaSet's scale and the template by name."""
    base = render(DEPLOY)
    for kind in ("ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"):
        assert by_kind(objects, kind) == by_kind(base, kind), kind
    job, template = one(objects, "Job"), one(objects, "PodTemplate")
    made = worker_set(objects)
    (owner,) = made["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                     "uid": JOB_UID, "controller": True, "blockOwnerDeletion": True}
    assert made["spec"]["selector"]["matchLabels"].items() <= pod_labels(made).items()
    rules = [r for role in by_kind(objects, "Role") for r in role["rules"]]
    name = template["metadata"]["name"]
    assert any("replicasets/scale" in r["resources"] and name in r.get("resourceNames", [])
               and "patch" in r["verbs"] for r in rules)
    assert any("podtemplates" in r["resources"] and name in r.get("resourceNames", []) for r in rules)
    assert any("jobs/finalizers" in r["resources"] and job["metadata"]["name"] in r.get("resourceNames", [])
               and "update" in r["verbs"] for r in rules)
    bound = {b["roleRef"]["name"]: [s["name"] for s in b["subjects"]] for b in by_kind(objects, "RoleBinding")}
    account = pod_spec(job)["serviceAccountName"]
    assert all(account in subjects for subjects in bound.values())
    assert set(bound) == {"elastic-horovod-pod-reader", "elastic-horovod-worker-scaler", "elastic-horovod-leader"}
    assert env(container(pod_spec(job), "worker-start"))["WORKER_REPLICASET"] == name


def test_sized_for_8_resnet50_ranks_on_the_nodes_the_readme_names(objects, imagenet):
    """Per rank at least the 1-GPU ImageNet worker's memory and the generic 8-GPU worker's
    CPUs; /dev/shm for 8 ranks; within what each named node has, with 8 vCPUs and 10 % of its
    memory left for the kubelet's reservation and the DaemonSets; no CPU limit, so a larger
    node's cores feed the loaders; memory requests = limits (evicted last)."""
    res = worker(objects)["resources"]
    assert "cpu" not in res["limits"] and res["requests"]["memory"] == res["limits"]["memory"]
    cpu, memory = float(res["requests"]["cpu"]), quantity(res["requests"]["memory"])
    one_gpu = worker(imagenet)["resources"]["limits"]
    assert memory >= 8 * quantity(one_gpu["memory"])
    assert cpu >= 44  # the gpu-8 component's, for any training
    shm = next(v for v in pod_spec(worker_set(objects))["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm["medium"] == "Memory" and 8 * 8 * GIB <= quantity(shm["sizeLimit"]) < memory / 4
    for node, (cpus, gib) in NODES.items():
        assert cpu <= cpus - 8, node
        assert memory <= 0.9 * gib * GIB, node
    # the ImageNet overlay's: the dataset is on the hostPath (not counted), /scratch is
    assert res["requests"]["ephemeral-storage"] == res["limits"]["ephemeral-storage"] == "30Gi"
    scratch = next(v for v in pod_spec(worker_set(objects))["volumes"] if v["name"] == "scratch")
    assert quantity(scratch["emptyDir"]["sizeLimit"]) < quantity("30Gi")


def test_the_readme_tells_how_to_run_it_and_what_it_asks_of_a_node(objects):
    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("### ImageNet on 8-GPU nodes"):]
    section = section[:section.index("\n## ", 1)]
    res = worker(objects)["resources"]["requests"]
    shm = next(v for v in pod_spec(worker_set(objects))["volumes"] if v["name"] == "dshm")
    for needed in ("kubectl apply -k deploy/overlays/imagenet/storage/",
                   "kubectl apply -k deploy/overlays/imagenet-gpu8/", "p4d.24xlarge", "a2-highgpu-8g",
                   f"{res['cpu']} CPUs", f"{res['memory'][:-2]} GiB", f"{shm['emptyDir']['sizeLimit'][:-2]} GiB",
                   "pod-security.kubernetes.io/enforce=privileged"):
        assert needed in section, needed
