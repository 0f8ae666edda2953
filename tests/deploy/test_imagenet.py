"""deploy/overlays/imagenet/: ResNet-50 on ImageNet-format data, sized for it, its dataset
paths one setting, the workers' /data a node-local cache that outlives the pod, nothing that
re-owns the dataset (deploy/README.md, "ImageNet")."""
import shlex

import pytest

from tests.deploy.render import (
    DEPLOY,
    config_maps,
    container,
    env,
    expand,
    flag,
    one,
    pod_labels,
    pod_spec,
    quantity,
    render,
    worker_set,
)

OVERLAY = DEPLOY / "overlays" / "imagenet"
GIB = 2**30
MANIFEST_PEAK = 2.7 * GIB  # one dataset-sync's peak RSS for ImageNet's 1.28 M files (README)


@pytest.fixture(scope="module")
def objects() -> list:
    return render(OVERLAY)


def expanded(objects: list, name: str) -> list:
    """A launcher pod container's args as the kubelet expands them."""
    job = one(objects, "Job")
    c = container(pod_spec(job), name)
    return [expand(a, c, pod_labels(job), config_maps(objects)) for a in c["args"]]


def test_the_dataset_paths_are_one_setting_that_every_command_reads(objects):
    setting = config_maps(objects)["elastic-horovod-dataset"]
    src, dest = setting["DATASET_SOURCE"], setting["DATASET_DEST"]
    daemon, launcher = expanded(objects, "discovery-daemon"), expanded(objects, "launcher")
    prepare = shlex.split(flag(daemon, "--prepare-cmd"))
    assert prepare[prepare.index("--dataset") + 1] == f"{src}:{dest}"
    split = launcher.index("--")
    assert flag(launcher[:split], "--dataset") == f"{src}:{dest}"
    assert flag(launcher[split:], "--data-dir") == dest
    # written nowhere else: the raw args hold only the references
    job = one(objects, "Job")
    for name in ("discovery-daemon", "launcher"):
        assert src not in str(container(pod_spec(job), name)["args"]), name
    spec = pod_spec(job)
    for name in ("discovery-daemon", "launcher"):
        mounts = {m["mountPath"]: m["name"] for m in container(spec, name)["volumeMounts"]}
        assert any(src.startswith(path + "/") and mounts[path] == "datasets" for path in mounts), name
    worker = container(pod_spec(worker_set(objects)), "worker")
    assert any(dest.startswith(m["mountPath"] + "/") and m["name"] == "data" for m in worker["volumeMounts"])


def test_it_trains_resnet50_with_flags_its_parser_takes(objects):
    import training.resnet50 as resnet50
    from elastic.launch.cli import _split, build_parser
    from training.options import parse

    launcher = expanded(objects, "launcher")
    own, command = _split(launcher[1:])
    build_parser().parse_args(own)
    assert command[:3] == ["python", "-m", "training.resnet50"]
    args = parse(command[3:], resnet50.DEFAULTS)
    assert args.data_dir == config_maps(objects)["elastic-horovod-dataset"]["DATASET_DEST"]
    assert args.snapshot_dir.startswith("/scratch/")  # per pod, not on the node's cache


def test_workers_data_is_a_node_local_cache_and_nothing_re_owns_the_dataset(objects):
    workers = pod_spec(worker_set(objects))
    volumes = {v["name"]: v for v in workers["volumes"]}
    assert volumes["data"] == {"name": "data", "hostPath": {"path": "/var/lib/elastic-horovod/datasets",
                                                             "type": "DirectoryOrCreate"}}
    assert "emptyDir" in volumes["scratch"]
    assert "fsGroup" not in workers.get("securityContext", {})
    launcher = pod_spec(one(objects, "Job"))["securityContext"]
    assert launcher.get("fsGroupChangePolicy") == "OnRootMismatch"  # the dataset claim: re-owned at most once


def test_sized_for_imagenet(objects):
    claim = one(render(OVERLAY / "storage"), "PersistentVolumeClaim", "elastic-horovod-datasets")
    assert quantity(claim["spec"]["resources"]["requests"]["storage"]) >= 150e9  # 140 GB train + 6.4 GB val
    worker = container(pod_spec(worker_set(objects)), "worker")["resources"]
    assert worker["requests"] == worker["limits"]
    assert quantity(worker["requests"]["cpu"]) >= 12 and quantity(worker["requests"]["memory"]) >= 48 * GIB
    job = one(objects, "Job")
    spec = pod_spec(job)
    daemon = container(spec, "discovery-daemon")
    limit = quantity(daemon["resources"]["limits"]["memory"])
    assert int(flag(daemon["args"], "--prepare-concurrency")) * MANIFEST_PEAK < limit
    launcher = container(spec, "launcher")
    n = int(flag(launcher["args"], "--max-np"))
    assert quantity(launcher["resources"]["limits"]["memory"]) >= (1024 + 8 * n) * 2**20 + MANIFEST_PEAK
    # a first copy may take an hour: the daemon does not kill it, the launcher waits for it
    prepare_timeout = float(flag(daemon["args"], "--prepare-timeout"))
    ready = float(flag(launcher["args"], "--ready-timeout"))
    assert 3600 <= prepare_timeout <= ready < float(flag(launcher["args"], "--first-world-timeout"))
    # a second worker on the node waits for the first one's copy under dataset-sync's lock
    for c in (daemon, launcher):
        assert float(env(c)["ELASTIC_SYNC_LOCK_TIMEOUT"]) >= prepare_timeout, c["name"]
    tmp = next(v for v in spec["volumes"] if v["name"] == "tmp")["emptyDir"]["sizeLimit"]
    assert quantity(tmp) >= GIB  # the hash cache of 1.28 M files (~250 MiB) with room
    assert env(daemon)["HOME"] == "/tmp" and env(launcher)["HOME"] == "/tmp"


def test_the_readme_tells_how_to_run_it(objects):
    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("## ImageNet"):]
    section = section[:section.index("\n## ", 1)]
    for needed in ("kubectl apply -k deploy/overlays/imagenet/storage/", "kubectl apply -k deploy/overlays/imagenet/",
                   "DATASET_SOURCE", "DATASET_DEST", "/var/lib/elastic-horovod/datasets",
                   "pod-security.kubernetes.io/enforce=privileged", "OnRootMismatch"):
        assert needed in section, needed


# What the overlay means to change in the base job's commands; every other flag must stay the
# base's, so a flag added to or changed in deploy/job/launcher.yaml reaches the overlay (it
# restates whole argument lists: a kustomize patch replaces a list, it does not merge it).
MEANT = {
    "discovery-daemon": {"--prepare-cmd --dataset", "--prepare-timeout", "--prepare-concurrency"},
    "launcher": {"--elastic-timeout", "--dataset", "--first-world-timeout", "--ready-timeout",
                 "-- -m", "-- --data-dir", "-- --epochs", "-- --snapshot-dir"},
}


def _flags(argv: list, prefix: str = "") -> dict:
    """argv's flags by name (``--a=b``, ``--a b``, ``-m mod``; the command after ``--`` as
    ``-- NAME``), a shell-quoted ``--prepare-cmd`` split into its own flags."""
    out: dict = {}
    if "--" in argv:  # the command's own flags apart from elastic-run's (both have --term-grace)
        cut = argv.index("--")
        return {**_flags(argv[:cut], prefix), **_flags(argv[cut + 1:], prefix + "-- ")}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, sep, value = arg.partition("=")
        if not arg.startswith("-"):
            out.setdefault(prefix + "argv", []).append(arg)
        elif sep:
            out[prefix + name] = value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[prefix + name] = argv[i + 1]
            i += 1
        else:
            out[prefix + name] = True
        if name == "--prepare-cmd" and sep:
            out.update(_flags(shlex.split(value), "--prepare-cmd "))
            del out[prefix + name]
        i += 1
    return out


@pytest.mark.parametrize("name", sorted(MEANT))
def test_the_overlay_changes_only_what_it_means_to_in_the_base_commands(objects, name):
    base = _flags(container(pod_spec(one(render(DEPLOY), "Job")), name)["args"])
    overlay = _flags(container(pod_spec(one(objects, "Job")), name)["args"])
    drift = sorted(k for k in base.keys() | overlay.keys()
                   if k not in MEANT[name] and base.get(k) != overlay.get(k))
    differs = {k: (base.get(k), overlay.get(k)) for k in drift}
    assert not drift, f"the ImageNet overlay's {name} differs from deploy/job/launcher.yaml's in {differs}"
    assert MEANT[name] <= overlay.keys(), f"{name}: {sorted(MEANT[name] - overlay.keys())} no longer set"


def _section() -> str:
    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("## ImageNet"):]
    return section[:section.index("\n## ", 1)]


def test_the_readmes_loader_fills_the_claim_the_launcher_reads_as_its_group(objects):
    """The section's steps, as a user runs them: the loader pod fills the claim the launcher
    mounts, under the launcher's fsGroup (so its first mount re-owns nothing), at the path
    DATASET_SOURCE names, in the namespace and through the names the manifests use."""
    import yaml

    section = _section()
    loader = yaml.safe_load(section[section.index("<<'EOF2'\n") + 9:section.index("\nEOF2\n")])
    job = one(objects, "Job")
    spec = pod_spec(job)
    claim = one(render(OVERLAY / "storage"), "PersistentVolumeClaim", "elastic-horovod-datasets")
    launcher_claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]
                       if "persistentVolumeClaim" in v}
    [volume] = loader["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"] == launcher_claims["datasets"]
    ctx = loader["spec"]["securityContext"]
    assert ctx["runAsGroup"] == ctx["fsGroup"] == spec["securityContext"]["fsGroup"]
    assert ctx["fsGroupChangePolicy"] == spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    [mount] = loader["spec"]["containers"][0]["volumeMounts"]
    source = config_maps(objects)["elastic-horovod-dataset"]["DATASET_SOURCE"]
    mounts = {m["name"]: m["mountPath"] for m in container(spec, "launcher")["volumeMounts"]}
    assert mount["mountPath"] == mounts["datasets"] and source.startswith(mount["mountPath"] + "/")
    assert f"mkdir -p {source}" in section and f"tar -xf - -C {source}" in section
    namespace = job["metadata"]["namespace"]
    assert f"kubectl -n {namespace} apply -f -" in section
    assert claim["metadata"]["namespace"] == namespace
    names = {c["name"] for c in spec.get("initContainers", []) + spec["containers"]}
    assert f"logs job/{job['metadata']['name']} -c discovery-daemon" in section and "discovery-daemon" in names


def _row(section: str, first: str) -> str:
    [row] = [line for line in section.splitlines() if line.startswith(f"| {first} |")]
    return row


def test_the_readmes_sizes_are_the_overlays(objects):
    """Every figure of the section's "Sizes" table is what the overlay renders."""
    section = _section()
    claim = one(render(OVERLAY / "storage"), "PersistentVolumeClaim", "elastic-horovod-datasets")
    assert f"`{claim['spec']['resources']['requests']['storage']}`" in _row(section, "dataset claim")
    spec = pod_spec(one(objects, "Job"))
    worker = container(pod_spec(worker_set(objects)), "worker")["resources"]["limits"]
    assert (f"| worker | {worker['cpu']} CPUs, {worker['memory'].replace('Gi', ' GiB')}, "
            f"{worker['nvidia.com/gpu']} GPU, `ephemeral-storage` {worker['ephemeral-storage']} |") in section
    daemon = container(spec, "discovery-daemon")
    limits = daemon["resources"]["limits"]
    row = _row(section, "daemon sidecar")
    assert f"limits {limits['cpu']} CPUs, {limits['memory'].replace('Gi', ' GiB')}" in row
    for name in ("--prepare-concurrency", "--prepare-timeout"):
        assert f"`{name}={flag(daemon['args'], name)}`" in row, name
    tmp = next(v for v in spec["volumes"] if v["name"] == "tmp")["emptyDir"]["sizeLimit"]
    assert f"| {tmp} |" in _row(section, "`tmp` emptyDir")
    launcher = container(spec, "launcher")
    row = _row(section, "`--ready-timeout` / `--first-world-timeout`")
    assert f"| {flag(launcher['args'], '--ready-timeout')} / {flag(launcher['args'], '--first-world-timeout')} s |" \
        in row
    row = _row(section, "`ELASTIC_SYNC_LOCK_TIMEOUT` (daemon, launcher)")
    assert env(daemon)["ELASTIC_SYNC_LOCK_TIMEOUT"] == env(launcher)["ELASTIC_SYNC_LOCK_TIMEOUT"]
    assert f"| {env(daemon)['ELASTIC_SYNC_LOCK_TIMEOUT']} s |" in row
