"""PodService: create defaults, updates and their limits, graceful deletion."""
from datetime import datetime, timezone

import pytest

from localcluster.core import PodService
from localcluster.errors import AlreadyExists, BadRequest, Conflict, Invalid
from localcluster.store import Store

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def body(name="p", **meta):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": dict(name=name, **meta),
            "spec": {"containers": [{"name": "c", "image": "img"}]}}


@pytest.fixture
def svc():
    ids = iter(range(1000))
    return PodService(Store(), clock=Clock(), new_uid=lambda: f"uid-{next(ids)}", new_suffix=lambda: "abcde")


def test_create_fills_server_fields(svc):
    pod = svc.create("default", body(labels={"a": "b"}))
    meta = pod["metadata"]
    assert (meta["uid"], meta["creationTimestamp"], meta["namespace"], meta["resourceVersion"]) == (
        "uid-0", "2026-01-02T03:04:05Z", "default", "1")
    assert pod["status"]["phase"] == "Pending" and pod["spec"]["terminationGracePeriodSeconds"] == 30
    assert svc.create("default", {**body(), "metadata": {"generateName": "w-"}})["metadata"]["name"] == "w-abcde"
    with pytest.raises(AlreadyExists, match='pods "p" already exists'):
        svc.create("default", body())


@pytest.mark.parametrize("bad,error", [
    ({"kind": "Service", "metadata": {"name": "x"}, "spec": {}}, BadRequest),
    ({"metadata": {"name": "x", "namespace": "other"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
     BadRequest),
    ({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, Invalid),
    ({"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, Invalid),
    ({"metadata": {"name": "x"}, "spec": {"containers": []}}, Invalid),
    ({"metadata": {"name": "x", "labels": {"a": "not ok!"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
     Invalid),
    ("not an object", BadRequest),
])
def test_create_rejects_bad_bodies(svc, bad, error):
    with pytest.raises(error, match="invalid|the body|namespace of the provided object"):
        svc.create("default", bad)


def test_replace_needs_the_current_resource_version(svc):
    pod = svc.create("default", body())
    stale = dict(pod, metadata=dict(pod["metadata"], labels={"x": "1"}))
    svc.replace("default", "p", stale)
    with pytest.raises(Conflict, match='Operation cannot be fulfilled on pods "p": the object has'):
        svc.replace("default", "p", stale)
    with pytest.raises(Invalid, match=r'Pod "p" is invalid: metadata\.resourceVersion: Invalid'):
        svc.replace("default", "p", dict(stale, metadata={"name": "p"}))


def test_spec_is_immutable_but_status_subresource_is_not(svc):
    svc.create("default", body())
    with pytest.raises(Invalid, match='Pod "p" is invalid: spec: Forbidden: pod updates may not'):
        svc.patch("default", "p", "application/merge-patch+json", b'{"spec":{"hostname":"x"}}')
    out = svc.patch("default", "p", "application/merge-patch+json", b'{"status":{"phase":"Running"}}', "status")
    assert out["status"]["phase"] == "Running"
    # the main resource ignores status changes, as in Kubernetes
    out = svc.patch("default", "p", "application/merge-patch+json",
                    b'{"status":{"phase":"Failed"},"metadata":{"labels":{"l":"1"}}}')
    assert out["status"]["phase"] == "Running" and out["metadata"]["labels"] == {"l": "1"}


def test_patch_with_a_stale_resource_version_conflicts(svc):
    svc.create("default", body())
    with pytest.raises(Conflict, match='Operation cannot be fulfilled on pods "p": the object has'):
        svc.patch("default", "p", "application/merge-patch+json",
                  b'{"metadata":{"resourceVersion":"999","labels":{"a":"b"}}}')


def test_no_op_patch_keeps_the_resource_version(svc):
    pod = svc.create("default", body(labels={"a": "b"}))
    again = svc.patch("default", "p", "application/merge-patch+json", b'{"metadata":{"labels":{"a":"b"}}}')
    assert again["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]


def test_graceful_deletion_of_a_bound_pod(svc):
    svc.create("default", body())
    svc.bind("default", "p", "local")
    marked = svc.delete("default", "p", grace=10)
    assert marked["metadata"]["deletionTimestamp"] == "2026-01-02T03:04:15Z"
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 10
    assert svc.delete("default", "p", grace=20) == marked  # cannot lengthen
    shorter = svc.delete("default", "p", grace=5)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    svc.finish_deletion("default", "p", "other-uid")  # another incarnation: no-op
    assert svc.store.find("default", "p") is not None
    svc.finish_deletion("default", "p", marked["metadata"]["uid"])
    assert svc.store.find("default", "p") is None


def test_unbound_pods_and_grace_zero_go_at_once(svc):
    svc.create("default", body("a"))
    svc.delete("default", "a")  # never bound to a node
    assert svc.store.find("default", "a") is None
    svc.create("default", body("b"))
    svc.bind("default", "b", "local")
    svc.delete("default", "b", grace=0)
    assert svc.store.find("default", "b") is None


def test_finalizers_hold_a_deleted_pod_until_removed(svc):
    svc.create("default", body(finalizers=["example.com/hold"]))
    svc.bind("default", "p", "n1")
    svc.delete("default", "p", grace=0)
    pod = svc.store.find("default", "p")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]
    svc.patch("default", "p", "application/json-patch+json", b'[{"op":"remove","path":"/metadata/finalizers"}]')
    assert svc.store.find("default", "p") is None


def test_delete_preconditions(svc):
    pod = svc.create("default", body())
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition: nope, UID in"):
        svc.delete("default", "p", preconditions={"uid": "nope"})
    with pytest.raises(Conflict, match="Precondition failed: ResourceVersion in precondition: 0,"):
        svc.delete("default", "p", preconditions={"resourceVersion": "0"})
    assert svc.delete("default", "p", preconditions={"uid": pod["metadata"]["uid"]})
