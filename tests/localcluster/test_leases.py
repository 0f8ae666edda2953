"""localcluster.leases: the Lease objects a leader election writes, with the answers a real
API server gives: 409 Conflict on an update that carries a stale resourceVersion (the
optimistic lock an election relies on), 409 AlreadyExists on a second create, 404 on a missing
one, 422 on a bad spec; an update without a resourceVersion is unconditional."""
import json
from datetime import datetime, timezone

import pytest

from localcluster.errors import AlreadyExists, BadRequest, Conflict, Invalid, NotFound
from localcluster.leases import Leases

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
MERGE = "application/merge-patch+json"


@pytest.fixture
def leases():
    return Leases(clock=lambda: T0, new_uid=lambda: "lease-uid")


def lease(holder="a", rv=None, **spec):
    meta: dict = {"name": "job"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3,
                     "renewTime": "2026-01-02T03:04:05.123456Z", **spec}}


def test_create_get_and_a_second_create_is_already_exists(leases):
    made = leases.create("ns", lease())
    assert made["metadata"]["uid"] == "lease-uid" and made["metadata"]["namespace"] == "ns"
    assert leases.get("ns", "job")["spec"]["holderIdentity"] == "a"
    with pytest.raises(AlreadyExists):
        leases.create("ns", lease("b"))
    with pytest.raises(NotFound):
        leases.get("other", "job")


def test_an_update_with_a_stale_resource_version_is_a_conflict(leases):
    first = leases.create("ns", lease())
    rv = first["metadata"]["resourceVersion"]
    taken = leases.replace("ns", "job", lease("b", rv=rv))
    assert taken["spec"]["holderIdentity"] == "b" and taken["metadata"]["resourceVersion"] != rv
    with pytest.raises(Conflict, match="the object has been modified"):
        leases.replace("ns", "job", lease("a", rv=rv))  # a's view is from before b took it
    assert leases.get("ns", "job")["spec"]["holderIdentity"] == "b"
    forced = leases.replace("ns", "job", lease("c"))  # no resourceVersion: unconditional
    assert forced["spec"]["holderIdentity"] == "c" and forced["metadata"]["uid"] == "lease-uid"


def test_a_patch_that_names_a_stale_resource_version_is_a_conflict(leases):
    rv = leases.create("ns", lease())["metadata"]["resourceVersion"]
    leases.patch("ns", "job", MERGE, json.dumps({"spec": {"holderIdentity": "b"}}).encode())
    with pytest.raises(Conflict):
        leases.patch("ns", "job", MERGE, json.dumps({"metadata": {"resourceVersion": rv},
                                                     "spec": {"holderIdentity": "a"}}).encode())
    assert leases.get("ns", "job")["spec"]["holderIdentity"] == "b"


@pytest.mark.parametrize("spec, field", [
    ({"leaseDurationSeconds": 0}, "spec.leaseDurationSeconds"),
    ({"leaseDurationSeconds": "3"}, "spec.leaseDurationSeconds"),
    ({"leaseTransitions": -1}, "spec.leaseTransitions"),
    ({"holderIdentity": 7}, "spec.holderIdentity"),
    ({"renewTime": "yesterday"}, "spec.renewTime"),
])
def test_a_bad_spec_is_invalid_naming_the_field(leases, spec, field):
    with pytest.raises(Invalid, match=field):
        leases.create("ns", lease(**spec))


def test_a_bad_name_or_body_is_refused(leases):
    with pytest.raises(Invalid, match="metadata.name"):
        leases.create("ns", {"metadata": {"name": "Not_A_Name"}})
    with pytest.raises(BadRequest):
        leases.create("ns", ["not", "an", "object"])
    leases.create("ns", lease())
    with pytest.raises(BadRequest, match="does not match"):
        leases.replace("ns", "job", {**lease(), "metadata": {"name": "other"}})


def test_list_and_delete(leases):
    leases.create("ns", lease())
    assert [o["metadata"]["name"] for o in leases.in_namespace("ns")] == ["job"]
    assert leases.in_namespace("other") == []
    assert leases.delete("ns", "job")["status"] == "Success"
    with pytest.raises(NotFound):
        leases.delete("ns", "job")
