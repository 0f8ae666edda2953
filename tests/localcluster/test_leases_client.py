"""Leases through the official client (``CoordinationV1Api``) against a running local cluster:
create, read, list, replace, patch and delete; a replace carrying a stale resourceVersion is
the 409 a real API server returns, and a second create is 409 too; a missing Lease is 404.
``kubectl get leases`` shows the holder, as against a real server."""
import subprocess
from datetime import datetime, timezone

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from localcluster.testing import running_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("leases") / "cluster") as lc:
        yield lc


@pytest.fixture(scope="module")
def api(cluster):
    return client.CoordinationV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))


def body(holder: str) -> client.V1Lease:
    return client.V1Lease(metadata=client.V1ObjectMeta(name="job"), spec=client.V1LeaseSpec(
        holder_identity=holder, lease_duration_seconds=3, lease_transitions=0,
        acquire_time=datetime.now(timezone.utc), renew_time=datetime.now(timezone.utc)))


def status_of(call) -> int:
    with pytest.raises(ApiException) as err:
        call()
    return err.value.status


def test_the_official_client_elects_through_a_lease_and_a_stale_update_is_409(api):
    assert status_of(lambda: api.read_namespaced_lease("job", "ns")) == 404
    made = api.create_namespaced_lease("ns", body("a"))
    assert made.spec.holder_identity == "a" and made.spec.renew_time.tzinfo is not None
    assert status_of(lambda: api.create_namespaced_lease("ns", body("b"))) == 409
    seen_by_a = api.read_namespaced_lease("job", "ns")
    seen_by_b = api.read_namespaced_lease("job", "ns")
    seen_by_b.spec.holder_identity = "b"
    seen_by_b.spec.lease_transitions = 1
    taken = api.replace_namespaced_lease("job", "ns", seen_by_b)
    assert taken.spec.holder_identity == "b"
    assert taken.metadata.resource_version != seen_by_a.metadata.resource_version
    seen_by_a.spec.renew_time = datetime.now(timezone.utc)
    assert status_of(lambda: api.replace_namespaced_lease("job", "ns", seen_by_a)) == 409
    patched = api.patch_namespaced_lease("job", "ns", {"spec": {"leaseDurationSeconds": 5}})
    assert patched.spec.lease_duration_seconds == 5 and patched.spec.holder_identity == "b"
    assert [item.metadata.name for item in api.list_namespaced_lease("ns").items] == ["job"]
    api.delete_namespaced_lease("job", "ns")
    assert status_of(lambda: api.read_namespaced_lease("job", "ns")) == 404


def test_kubectl_shows_who_holds_a_lease(cluster, api):
    api.create_namespaced_lease("kubectl", body("launcher-0"))
    proc = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "-n", "kubectl", "get", "leases"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    header, row = [line.split() for line in proc.stdout.strip().splitlines()]
    assert header == ["NAME", "HOLDER", "AGE"] and row[:2] == ["job", "launcher-0"]
