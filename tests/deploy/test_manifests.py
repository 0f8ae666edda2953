"""deploy/ renders with kustomize into objects the Kubernetes API accepts, with an RBAC
that lets the launcher read pods and scale its own workers and nothing more, and wiring that
agrees with itself (selector <-> worker labels, Secret file names, the daemon on loopback)."""
import inspect
import json
import shlex

import pytest
from kubernetes import client

from tests.deploy.render import (
    DEPLOY,
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

NAMESPACE = "elastic-horovod"

# apiVersion -> the kubernetes client's model prefix
MODEL_PREFIX = {"v1": "V1", "apps/v1": "V1", "batch/v1": "V1", "policy/v1": "V1",
                "rbac.authorization.k8s.io/v1": "V1", "networking.k8s.io/v1": "V1"}


class _Response:
    """What ApiClient.deserialize reads in clients before v33: the JSON body in .data."""

    def __init__(self, obj: dict):
        self.data = json.dumps(obj)


def load_model(api: client.ApiClient, obj: dict, model_name: str):
    """ApiClient.deserialize across client versions (v33+ takes the text and a content type)."""
    params = inspect.signature(api.deserialize).parameters
    if "content_type" in params:
        return api.deserialize(json.dumps(obj), model_name, "application/json")
    return api.deserialize(_Response(obj), model_name)


@pytest.fixture(scope="module")
def objects() -> list:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def storage() -> list:
    return render(DEPLOY / "storage")


def launcher_spec(objects):
    return pod_spec(one(objects, "Job"))


def prepare_argv(objects) -> list:
    daemon = container(launcher_spec(objects), "discovery-daemon")
    return shlex.split(flag(daemon["args"], "--prepare-cmd"))


def test_renders_the_job_and_keeps_storage_apart(objects, storage):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == sorted([
        ("ServiceAccount", "elastic-horovod-launcher"),
        ("ServiceAccount", "elastic-horovod-worker"),
        ("Role", "elastic-horovod-pod-reader"),
        ("RoleBinding", "elastic-horovod-launcher-pod-reader"),
        ("Role", "elastic-horovod-worker-scaler"),
        ("RoleBinding", "elastic-horovod-launcher-worker-scaler"),
        ("Role", "elastic-horovod-leader"),
        ("RoleBinding", "elastic-horovod-launcher-leader"),
        ("PodTemplate", "elastic-horovod-worker"),
        ("PodDisruptionBudget", "elastic-horovod-worker"),
        ("Job", "elastic-horovod-launcher"),
        ("Service", "elastic-horovod-rendezvous"),
        ("NetworkPolicy", "elastic-horovod-job"),
        ("NetworkPolicy", "elastic-horovod-launcher-api"),
    ])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in storage) == [
        ("PersistentVolumeClaim", "elastic-horovod-checkpoints"),
        ("PersistentVolumeClaim", "elastic-horovod-datasets"),
    ]
    for obj in objects + storage:
        assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]


def test_every_object_loads_into_the_client_models_without_losing_a_field(objects, storage):
    """A misspelt or misplaced field is dropped by the model: the round trip shows it."""
    api = client.ApiClient()
    for obj in objects + storage:
        model_name = MODEL_PREFIX[obj["apiVersion"]] + obj["kind"]
        model = load_model(api, obj, model_name)
        assert type(model).__name__ == model_name
        again = api.sanitize_for_serialization(model)
        assert again == obj, f"{obj['kind']}/{obj['metadata']['name']} changed in the round trip"


def test_rbac_is_least_privilege(objects):
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    reader = one(objects, "Role", "elastic-horovod-pod-reader")
    assert reader["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    scaler = one(objects, "Role", "elastic-horovod-worker-scaler")
    sts = worker_set(objects)
    job = one(objects, "Job")
    assert scaler["rules"] == [
        # the workers' pods, read by worker-start
        {"apiGroups": [""], "resources": ["podtemplates"], "resourceNames": [sts["metadata"]["name"]],
         "verbs": ["get"]},
        # the ReplicaSet made with its owner in the create: RBAC cannot name what a create makes
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["replicasets/scale"], "resourceNames": [sts["metadata"]["name"]],
         "verbs": ["get", "patch"]},
        # is it there, is it this Job's, is it being deleted; never patch, update or delete: its
        # owner is set at its creation and never changed
        {"apiGroups": ["apps"], "resources": ["replicasets"], "resourceNames": [sts["metadata"]["name"]],
         "verbs": ["get"]},
        # the Job's uid (the ownerReference) and its retries
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [job["metadata"]["name"]], "verbs": ["get"]},
        # what the API asks of whoever sets blockOwnerDeletion on an ownerReference to the Job
        {"apiGroups": ["batch"], "resources": ["jobs/finalizers"], "resourceNames": [job["metadata"]["name"]],
         "verbs": ["update"]},
        # the launcher's end recorded as an Event on the Job (a create cannot be named either)
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    account = launcher_spec(objects)["serviceAccountName"]
    for binding in by_kind(objects, "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["roleRef"]["name"] in {r["metadata"]["name"] for r in by_kind(objects, "Role")}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE, "name": account}]
    assert '"*"' not in json.dumps(objects)


def test_workers_carry_no_api_credentials(objects):
    spec = pod_spec(worker_set(objects))
    assert spec["automountServiceAccountToken"] is False
    bound = {s["name"] for b in by_kind(objects, "RoleBinding") for s in b["subjects"]}
    assert spec["serviceAccountName"] not in bound


def test_the_daemon_selects_this_jobs_workers_and_not_the_launcher(objects):
    job = one(objects, "Job")
    daemon = container(pod_spec(job), "discovery-daemon")
    selector = parse_selector(expand(env(daemon)["DISCOVERY_SELECTOR"], daemon, pod_labels(job)))
    assert "elastic-horovod/job" in selector
    sts = worker_set(objects)
    worker_labels = pod_labels(sts)
    assert selector.items() <= worker_labels.items()
    assert not selector.items() <= pod_labels(job).items()
    assert sts["spec"]["selector"]["matchLabels"].items() <= worker_labels.items()
    # the namespace the daemon watches is the pod's own (downward API), where the Role grants
    ns_env = next(e for e in daemon["env"] if e["name"] == "DISCOVERY_NAMESPACE")
    assert ns_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_daemon_is_a_loopback_sidecar_that_elastic_run_reaches(objects):
    spec = launcher_spec(objects)
    daemon = container(spec, "discovery-daemon")
    assert daemon["restartPolicy"] == "Always"  # native sidecar: stops when the launcher ends
    args = daemon["args"]
    assert args[0] == "discovery-daemon"
    assert "--host=127.0.0.1" in args
    assert "startupProbe" in daemon
    launcher = container(spec, "launcher")
    assert launcher["args"][0] == "elastic-run"
    assert env(launcher)["DISCOVERY_URL"] == f"http://127.0.0.1:{flag(args, '--port')}"
    assert spec["restartPolicy"] == "Never"


def test_the_prepare_hook_and_launcher_agree_on_paths(objects):
    """The daemon's prepare hook syncs the same dataset, with the same key and ssh dir, that
    elastic-run syncs at start; both see the paths they name."""
    spec = launcher_spec(objects)
    daemon = container(spec, "discovery-daemon")
    launcher = container(spec, "launcher")
    prepare = prepare_argv(objects)
    assert prepare[:3] == ["python", "-m", "elastic.prepare.hook"]
    run_args = launcher["args"][: launcher["args"].index("--")]
    assert flag(prepare, "--dataset") == flag(run_args, "--dataset")
    assert flag(prepare, "--identity") == flag(run_args, "--ssh-identity-file")
    assert flag(prepare, "--ssh-dir") == flag(run_args, "--ssh-dir")
    assert flag(prepare, "--ssh-port") == flag(run_args, "--ssh-port")

    def mounted(container_, path):
        return any(path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
                   for m in container_.get("volumeMounts", []))

    for c in (daemon, launcher):
        for path in (flag(prepare, "--identity"), flag(prepare, "--ssh-dir"),
                     flag(prepare, "--dataset").split(":")[0]):
            assert mounted(c, path), f"{c['name']} does not mount {path}"


def test_ssh_secret_is_mounted_where_the_key_files_are_expected(objects):
    """ssh-bootstrap keys writes id_ed25519 and id_ed25519.pub into the Secret; the worker
    image reads $ELASTIC_SSH_SECRET_DIR/id_ed25519.pub, the launcher uses id_ed25519."""
    sts_spec = pod_spec(worker_set(objects))
    job_spec = launcher_spec(objects)
    secret_names = {v["secret"]["secretName"] for spec in (sts_spec, job_spec)
                    for v in spec["volumes"] if "secret" in v}
    assert secret_names == {"elastic-horovod-ssh"}
    worker = container(sts_spec, "worker")
    secret_dir = env(worker)["ELASTIC_SSH_SECRET_DIR"]
    ssh_vol = next(v for v in sts_spec["volumes"] if "secret" in v)
    assert any(m["name"] == ssh_vol["name"] and m["mountPath"] == secret_dir for m in worker["volumeMounts"])
    assert [i["path"] for i in ssh_vol["secret"]["items"]] == ["id_ed25519.pub"]
    launcher = container(job_spec, "launcher")
    assert flag(launcher["args"], "--ssh-identity-file") == secret_dir + "/id_ed25519"


def test_workers_ask_for_gpus_serve_ssh_and_have_a_dataset_volume(objects):
    sts_spec = pod_spec(worker_set(objects))
    worker = container(sts_spec, "worker")
    assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    ssh_port = int(env(worker)["SSH_PORT"])
    assert worker["ports"] == [{"name": "ssh", "containerPort": ssh_port}]
    data = next(m for m in worker["volumeMounts"] if m["mountPath"] == "/data")
    assert any(v["name"] == data["name"] for v in sts_spec["volumes"])
    launcher = container(launcher_spec(objects), "launcher")
    assert flag(launcher["args"], "--ssh-port") == str(ssh_port)
    assert flag(launcher["args"], "--dataset").split(":", 1)[1].startswith("/data/")


def test_the_readiness_probe_checks_the_ssh_port_without_connecting(objects):
    """An exec probe (the entrypoint's `ready` mode reads /proc/net/tcp for a listening socket
    on the container's $SSH_PORT: no port in the manifest to keep in step, no TCP connection,
    so sshd logs nothing per probe; tests/images runs it)."""
    worker = container(pod_spec(worker_set(objects)), "worker")
    probe = worker["readinessProbe"]
    assert "tcpSocket" not in probe
    assert probe["exec"]["command"] == ["/usr/local/bin/worker-entrypoint", "ready"]
    assert probe["timeoutSeconds"] >= 5
    assert "SSH_PORT" in env(worker)


def test_the_launcher_and_prepare_commands_are_valid_for_our_own_parsers(objects):
    """The manifests call elastic-run and elastic.run_prepare with flags those accept."""
    from elastic.launch.cli import _split, build_parser

    launcher = container(launcher_spec(objects), "launcher")
    own, command = _split(launcher["args"][1:])
    args = build_parser().parse_args(own)
    assert args.min_np == 2 and args.max_np >= args.min_np
    assert args.network_interface == ["eth0"]
    assert command[:3] == ["python", "-m", "training.mnist"]
    prepare = prepare_argv(objects)
    from elastic.prepare.hook import build_parser as prepare_parser

    parsed = prepare_parser().parse_args(prepare[3:] + ["10.0.0.7"])
    assert parsed.host == "10.0.0.7"
    assert parsed.dataset == "/datasets/mnist:/data/mnist"
    assert parsed.ssh_port == 2222


def test_the_training_command_is_valid_for_the_training_parser(objects):
    """The training flags after `--` parse, with the job name expanded as the kubelet does;
    checkpoints go to the shared volume the workers mount, one directory per job."""
    import training.mnist as mnist
    from training.options import Defaults, parse

    job = one(objects, "Job")
    launcher = container(pod_spec(job), "launcher")
    command = [expand(a, launcher, pod_labels(job)) for a in launcher["args"]]
    command = command[command.index("--") + 1:]
    defaults = next(v for v in vars(mnist).values() if isinstance(v, Defaults))
    args = parse(command[3:], defaults)
    labels = pod_labels(job)
    job_uid = labels["batch.kubernetes.io/controller-uid"]
    assert args.checkpoint_dir == f"/checkpoints/{labels['elastic-horovod/job']}/{job_uid}"
    worker = container(pod_spec(worker_set(objects)), "worker")
    assert any(m["mountPath"] == "/checkpoints" for m in worker["volumeMounts"])


@pytest.mark.parametrize("name", ["worker-start", "worker-scaler"])
def test_the_worker_scaler_command_is_valid_for_its_parser(objects, name):
    from elastic.scaler.scale_workers import parse_args as scaler_args

    job = one(objects, "Job")
    scaler = container(pod_spec(job), name)
    argv = [expand(a, scaler, pod_labels(job)) for a in scaler["args"]]
    assert argv[:3] == ["python", "-m", "elastic.scaler.scale_workers"]
    args = scaler_args([a.replace("$(POD_NAME)", "launcher-abcde") for a in argv[3:]])
    assert args.workers == ("replicasets", worker_set(objects)["metadata"]["name"])
    assert args.job == job["metadata"]["name"]  # made the workers' owner, read for its retries
    if name == "worker-scaler":
        assert args.pod == "launcher-abcde" and args.container == "launcher"
    assert args.namespace is None  # the service account's namespace, from the projected token volume
    launcher_spec_ = pod_spec(job)
    tokens = next(v for v in launcher_spec_["volumes"] if "projected" in v)
    assert any("downwardAPI" in s and s["downwardAPI"]["items"][0]["path"] == "namespace"
               for s in tokens["projected"]["sources"])


def test_the_daemon_command_is_valid_for_its_parser(objects, monkeypatch):
    """discovery-daemon's flags parse, and its selector (from the environment, as the kubelet
    expands it) names this job's workers."""
    from discovery.cli import build_parser as daemon_parser

    job = one(objects, "Job")
    daemon = container(pod_spec(job), "discovery-daemon")
    monkeypatch.setenv("DISCOVERY_SELECTOR", expand(env(daemon)["DISCOVERY_SELECTOR"], daemon, pod_labels(job)))
    args = daemon_parser().parse_args(daemon["args"][1:])
    assert args.host == "127.0.0.1"
    assert parse_selector(args.selector).items() <= pod_labels(worker_set(objects)).items()


def test_a_restarted_daemon_sidecar_keeps_what_it_prepared(objects):
    """The sidecar's --admitted-file lies on the pod's emptyDir beside the pinned keys its
    prepare command writes, so a restarted sidecar (restartPolicy Always) does not take every
    worker out of /hosts while it prepares them again."""
    daemon = container(launcher_spec(objects), "discovery-daemon")
    path = flag(daemon["args"], "--admitted-file")
    ssh_dir = flag(prepare_argv(objects), "--ssh-dir")
    assert path.startswith(ssh_dir + "/")
    mounts = {m["mountPath"]: m["name"] for m in daemon["volumeMounts"]}
    volumes = {v["name"]: v for v in launcher_spec(objects)["volumes"]}
    mount = next(m for m in mounts if ssh_dir.startswith(m))
    assert "emptyDir" in volumes[mounts[mount]]


def test_the_training_keeps_its_local_snapshots_on_the_workers_data_volume(objects):
    """--snapshot-dir on the workers' /data (pod-local, the node's disk), not /tmp in the
    container's writable layer: a retried launcher resumes from the newest commit any worker
    holds (training/README.md, "Checkpoints, local snapshots and the launcher's loss")."""
    launcher = container(launcher_spec(objects), "launcher")
    train = launcher["args"][launcher["args"].index("--") + 1:]
    assert flag(train, "--snapshot-dir").startswith("/data/")
    assert not flag(train, "--snapshot-dir").startswith("/data/mnist")  # dataset-sync owns that tree
