"""deploy/ renders with kustomize into objects the Kubernetes API accepts, with an RBAC
that lets the launcher read pods in its namespace and nothing more, and wiring that agrees
with itself (selector <-> worker labels, Secret file names, the daemon on loopback)."""
import inspect
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "elastic-horovod"

# apiVersion group -> the kubernetes client's model prefix
MODEL_PREFIX = {"v1": "V1", "apps/v1": "V1", "rbac.authorization.k8s.io/v1": "V1"}


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
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render deploy/ (kubectl kustomize)"
    proc = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert docs, "kustomize rendered nothing"
    return docs


def by_kind(objects: list, kind: str) -> list:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list, kind: str) -> dict:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def parse_selector(selector: str) -> dict:
    return dict(term.split("=", 1) for term in selector.split(","))


def container_env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_renders_the_expected_objects(objects):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == sorted([
        ("Namespace", NAMESPACE),
        ("ServiceAccount", "elastic-horovod-launcher"),
        ("ServiceAccount", "elastic-horovod-worker"),
        ("Role", "elastic-horovod-pod-reader"),
        ("RoleBinding", "elastic-horovod-launcher-pod-reader"),
        ("PersistentVolumeClaim", "elastic-horovod-datasets"),
        ("Service", "elastic-horovod-workers"),
        ("StatefulSet", "elastic-horovod-worker"),
        ("Pod", "elastic-horovod-launcher"),
    ])
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]


def test_every_object_loads_into_the_client_models_without_losing_a_field(objects):
    """A misspelt or misplaced field is dropped by the model: the round trip shows it."""
    api = client.ApiClient()
    for obj in objects:
        model_name = MODEL_PREFIX[obj["apiVersion"]] + obj["kind"]
        model = load_model(api, obj, model_name)
        assert type(model).__name__ == model_name
        again = api.sanitize_for_serialization(model)
        assert again == obj, f"{obj['kind']}/{obj['metadata']['name']} changed in the round trip"


def test_rbac_is_least_privilege(objects):
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    role = one(objects, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    launcher = one(objects, "Pod")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE,
                                    "name": launcher["spec"]["serviceAccountName"]}]
    text = json.dumps(objects)
    assert '"*"' not in text


def test_workers_carry_no_api_credentials(objects):
    pod_spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    bound = {s["name"] for s in one(objects, "RoleBinding")["subjects"]}
    assert pod_spec["serviceAccountName"] not in bound


def test_the_daemon_selects_the_workers_and_not_the_launcher(objects):
    launcher = one(objects, "Pod")
    daemon = next(c for c in launcher["spec"]["initContainers"] if c["name"] == "discovery-daemon")
    selector = parse_selector(container_env(daemon)["DISCOVERY_SELECTOR"])
    sts = one(objects, "StatefulSet")
    worker_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= worker_labels.items()
    assert not selector.items() <= launcher["metadata"]["labels"].items()
    assert sts["spec"]["selector"]["matchLabels"].items() <= worker_labels.items()
    service = one(objects, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= worker_labels.items()
    # the namespace the daemon watches is the pod's own (downward API), where the Role grants
    ns_env = next(e for e in daemon["env"] if e["name"] == "DISCOVERY_NAMESPACE")
    assert ns_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_daemon_is_a_loopback_sidecar_that_elastic_run_reaches(objects):
    spec = one(objects, "Pod")["spec"]
    daemon = next(c for c in spec["initContainers"] if c["name"] == "discovery-daemon")
    assert daemon["restartPolicy"] == "Always"  # native sidecar: stops when the launcher ends
    args = daemon["command"]
    assert args[0] == "discovery-daemon"
    assert "--host=127.0.0.1" in args
    port = next(a.split("=", 1)[1] for a in args if a.startswith("--port="))
    assert "startupProbe" in daemon
    launcher = next(c for c in spec["containers"] if c["name"] == "launcher")
    assert launcher["command"][0] == "elastic-run"
    assert container_env(launcher)["DISCOVERY_URL"] == f"http://127.0.0.1:{port}"
    assert spec["restartPolicy"] == "Never"


def test_the_prepare_hook_and_launcher_agree_on_paths(objects):
    """The daemon's prepare hook syncs the same dataset, with the same key and ssh dir, that
    elastic-run syncs at start; both see the paths they name."""
    spec = one(objects, "Pod")["spec"]
    daemon = next(c for c in spec["initContainers"] if c["name"] == "discovery-daemon")
    launcher = next(c for c in spec["containers"] if c["name"] == "launcher")
    prepare = shlex.split(next(a.split("=", 1)[1] for a in daemon["command"] if a.startswith("--prepare-cmd=")))
    assert prepare[:3] == ["python", "-m", "elastic.launch.prepare"]

    def flag(argv, name):
        for i, a in enumerate(argv):
            if a == name:
                return argv[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        raise AssertionError(f"{name} missing from {argv}")

    run_args = launcher["command"][: launcher["command"].index("--")]
    assert flag(prepare, "--dataset") == flag(run_args, "--dataset")
    assert flag(prepare, "--identity") == flag(run_args, "--ssh-identity-file")
    assert flag(prepare, "--ssh-dir") == flag(run_args, "--ssh-dir")
    assert flag(prepare, "--ssh-port") == flag(run_args, "--ssh-port")

    def mounted(container, path):
        return any(path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
                   for m in container.get("volumeMounts", []))

    for container in (daemon, launcher):
        for path in (flag(prepare, "--identity"), flag(prepare, "--ssh-dir"),
                     flag(prepare, "--dataset").split(":")[0]):
            assert mounted(container, path), f"{container['name']} does not mount {path}"


def test_ssh_secret_is_mounted_where_the_key_files_are_expected(objects):
    """ssh-bootstrap keys writes id_ed25519 and id_ed25519.pub into the Secret; the worker
    image reads $ELASTIC_SSH_SECRET_DIR/id_ed25519.pub, the launcher uses id_ed25519."""
    sts_spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    pod_spec = one(objects, "Pod")["spec"]
    secret_names = set()
    for spec in (sts_spec, pod_spec):
        for vol in spec["volumes"]:
            if "secret" in vol:
                secret_names.add(vol["secret"]["secretName"])
                assert vol["secret"]["defaultMode"] == 0o400
    assert secret_names == {"elastic-horovod-ssh"}
    worker = sts_spec["containers"][0]
    secret_dir = container_env(worker)["ELASTIC_SSH_SECRET_DIR"]
    ssh_vol = next(v["name"] for v in sts_spec["volumes"] if "secret" in v)
    assert any(m["name"] == ssh_vol and m["mountPath"] == secret_dir for m in worker["volumeMounts"])
    launcher = next(c for c in pod_spec["containers"] if c["name"] == "launcher")
    identity = next(a.split("=", 1)[1] for a in launcher["command"] if a.startswith("--ssh-identity-file="))
    assert identity == secret_dir + "/id_ed25519"


def test_workers_ask_for_gpus_serve_ssh_and_have_a_dataset_volume(objects):
    sts_spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    worker = sts_spec["containers"][0]
    assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    ssh_port = int(container_env(worker)["SSH_PORT"])
    assert worker["ports"] == [{"name": "ssh", "containerPort": ssh_port}]
    assert worker["readinessProbe"]["tcpSocket"]["port"] == "ssh"
    data = next(m for m in worker["volumeMounts"] if m["mountPath"] == "/data")
    assert any(v["name"] == data["name"] for v in sts_spec["volumes"])
    launcher = next(c for c in one(objects, "Pod")["spec"]["containers"] if c["name"] == "launcher")
    assert f"--ssh-port={ssh_port}" in launcher["command"]
    dataset = next(a.split("=", 1)[1] for a in launcher["command"] if a.startswith("--dataset="))
    assert dataset.split(":", 1)[1].startswith("/data/")


def test_the_launcher_and_prepare_commands_are_valid_for_our_own_parsers(objects):
    """The manifests call elastic-run and elastic.launch.prepare with flags those accept."""
    from elastic.launch.cli import _split, build_parser

    spec = one(objects, "Pod")["spec"]
    launcher = next(c for c in spec["containers"] if c["name"] == "launcher")
    own, command = _split(launcher["command"][1:])
    args = build_parser().parse_args(own)
    assert args.min_np == 2 and args.max_np >= args.min_np
    assert args.network_interface == ["eth0"]
    assert command[:3] == ["python", "-m", "training.mnist"]
    daemon = next(c for c in spec["initContainers"] if c["name"] == "discovery-daemon")
    prepare = shlex.split(next(a.split("=", 1)[1] for a in daemon["command"] if a.startswith("--prepare-cmd=")))
    from elastic.launch.prepare import build_parser as prepare_parser

    parsed = prepare_parser().parse_args(prepare[3:] + ["10.0.0.7"])
    assert parsed.host == "10.0.0.7"
    assert parsed.dataset == "/datasets/mnist:/data/mnist"
    assert parsed.ssh_port == 2222
