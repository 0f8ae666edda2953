"""kubectl v1.32 against the local cluster, with nothing but the written kubeconfig."""
import json
import shutil
import subprocess

import pytest


@pytest.fixture(autouse=True)
def kubectl_is_installed():
    """kubectl is required, not optional: scripts/setup installs it (a missing one fails)."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is required (scripts/setup installs it)")


def kubectl(cluster, *args, timeout=60, check=True):
    proc = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def rows(output):
    return [line.split() for line in output.strip().splitlines()[1:]]


def test_get_label_annotate_json_and_delete(cluster):
    cluster.create_pod("worker-0")
    cluster.create_pod("worker-1")
    cluster.create_pod("driver", labels={"app": "elastic-horovod", "role": "driver"}, node_name="elsewhere")
    cluster.wait_ready("worker-0")
    cluster.wait_ready("worker-1")

    table = rows(kubectl(cluster, "get", "pods", "-l", "role=worker").stdout)
    assert [(r[0], r[1], r[2]) for r in table] == [("worker-0", "1/1", "Running"), ("worker-1", "1/1", "Running")]
    wide = rows(kubectl(cluster, "get", "pods", "-o", "wide", "-l", "role in (driver)").stdout)
    assert [(r[0], r[2], r[6]) for r in wide] == [("driver", "Pending", "elsewhere")]

    kubectl(cluster, "label", "pod", "worker-1", "color=blue")
    kubectl(cluster, "annotate", "pod", "worker-1", "elastic-horovod/slots=4")
    doc = json.loads(kubectl(cluster, "get", "pods", "-l", "color=blue", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in doc["items"]] == ["worker-1"]
    assert doc["items"][0]["metadata"]["annotations"]["elastic-horovod/slots"] == "4"
    one = json.loads(kubectl(cluster, "get", "pod", "worker-0", "-o", "json").stdout)
    assert one["status"]["podIP"] == cluster.pod_ip("worker-0")
    assert rows(kubectl(cluster, "get", "pods", "-A", "--field-selector", "status.phase=Running").stdout)[0][:2] == [
        "default", "worker-0"]

    bad = kubectl(cluster, "get", "pods", "-l", "role in (worker", check=False)
    assert bad.returncode == 1 and "unable to parse requirement" in bad.stderr
    missing = kubectl(cluster, "get", "pod", "nope", check=False)
    assert missing.returncode == 1 and 'pods "nope" not found' in missing.stderr

    # kubectl logs shows the pod's sshd log: one line per accepted session
    assert cluster.ssh("worker-1", "true").returncode == 0
    logs = kubectl(cluster, "logs", "worker-1").stdout
    assert "Accepted publickey for" in logs
    assert kubectl(cluster, "logs", "driver", check=False).returncode == 1  # not run here

    # kubectl delete waits (by watching) until the pod is really gone
    out = kubectl(cluster, "delete", "pod", "worker-0").stdout
    assert 'pod "worker-0" deleted' in out
    assert [r[0] for r in rows(kubectl(cluster, "get", "pods").stdout)] == ["driver", "worker-1"]


def test_get_watch_streams_changes(cluster):
    cluster.create_pod("watched", node_name="elsewhere")
    proc = subprocess.Popen(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "get", "pods", "-w",
                             "--output-watch-events", "--request-timeout=60s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        first = proc.stdout.readline()  # header
        assert first.split()[:2] == ["EVENT", "NAME"], first
        assert proc.stdout.readline().split()[:2] == ["ADDED", "watched"]
        cluster.set_ready("watched", True)
        assert proc.stdout.readline().split()[:2] == ["MODIFIED", "watched"]
        cluster.delete_pod("watched", grace_seconds=0)
        assert proc.stdout.readline().split()[:2] == ["DELETED", "watched"]
    finally:
        proc.kill()
        proc.communicate()


def test_get_watch_ends_cleanly_with_request_timeout(cluster):
    cluster.create_pod("w", node_name="elsewhere")
    proc = kubectl(cluster, "get", "pods", "-w", "--request-timeout=2s", timeout=30)  # exits 0 by itself
    assert [r[:3] for r in rows(proc.stdout)] == [["w", "0/1", "Pending"]]


POD_YAML = """apiVersion: v1
kind: Pod
metadata:
  name: applied
  labels: {app: elastic-horovod, role: worker%s}
spec:
  nodeName: elsewhere
  containers:
  - name: w
    image: example/worker
"""


def test_apply_creates_then_patches(cluster, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD_YAML % "")
    assert "pod/applied created" in kubectl(cluster, "apply", "-f", str(manifest)).stdout
    manifest.write_text(POD_YAML % ", extra: '1'")
    assert "pod/applied configured" in kubectl(cluster, "apply", "-f", str(manifest)).stdout
    pod = cluster.client.get_pod("applied")
    assert pod["metadata"]["labels"] == {"app": "elastic-horovod", "role": "worker", "extra": "1"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in pod["metadata"]["annotations"]


def test_unknown_fields_are_refused_under_strict_validation(cluster, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text((POD_YAML % "").replace("image: example/worker", "image: example/worker\n    imagee: typo"))
    proc = kubectl(cluster, "apply", "-f", str(manifest), check=False)
    assert proc.returncode == 1 and 'unknown field "spec.containers[0].imagee"' in proc.stderr
    proc = kubectl(cluster, "apply", "--validate=warn", "-f", str(manifest))
    assert 'unknown field "spec.containers[0].imagee"' in proc.stderr  # created, with a warning
