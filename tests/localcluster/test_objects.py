"""localcluster.objects: PodTemplates and Jobs stored as sent (a uid, a creationTimestamp),
checked where they enter, and the garbage collector's cascade: deleting a Job deletes the
ReplicaSets that name it as an owner, with their pods, or orphans them; nothing else is touched."""
from datetime import datetime, timezone

import pytest

from localcluster.core import PodService
from localcluster.errors import AlreadyExists, BadRequest, Invalid, NotFound
from localcluster.objects import Objects
from localcluster.replicasets import ReplicaSets
from localcluster.store import Store

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
LABELS = {"app": "w"}
TEMPLATE = {"metadata": {"labels": LABELS}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.fixture
def cluster():
    ids = iter(range(1000))
    svc = PodService(Store(), clock=lambda: T0, new_uid=lambda: f"pod-{next(ids)}")
    sets = ReplicaSets(svc, clock=lambda: T0, new_uid=lambda: f"rs-{next(ids)}")
    jobs = Objects("jobs", "batch/v1", "Job", owned=sets.collect, clock=lambda: T0,
                   new_uid=lambda: f"job-{next(ids)}")
    return sets, jobs


def rs(name: str, owners: list) -> dict:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "ownerReferences": owners},
            "spec": {"replicas": 2, "selector": {"matchLabels": LABELS}, "template": TEMPLATE}}


def live(sets) -> list:
    return [p for p in sets.service.list()[0] if not p["metadata"].get("deletionTimestamp")]


def test_deleting_a_job_deletes_the_replicasets_it_owns_and_their_pods_only(cluster):
    sets, jobs = cluster
    job = jobs.create("ns", {"metadata": {"name": "launcher"}, "spec": {"backoffLimit": 3}})
    assert job["metadata"]["uid"].startswith("job-") and job["status"] == {} and job["kind"] == "Job"
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "launcher", "uid": job["metadata"]["uid"],
           "controller": True, "blockOwnerDeletion": True}
    sets.create("ns", rs("workers", [ref]))
    sets.create("ns", {**rs("others", []), "spec": {**rs("others", [])["spec"], "selector": {"matchLabels": LABELS}}})
    sets.reconcile()
    assert sets.get("ns", "workers")["metadata"]["ownerReferences"] == [ref]
    assert len(live(sets)) == 4
    jobs.delete("ns", "launcher")
    with pytest.raises(NotFound):
        sets.get("ns", "workers")
    with pytest.raises(NotFound):
        jobs.get("ns", "launcher")
    assert sets.get("ns", "others")  # not the Job's: kept, and its pods with it
    assert {p["metadata"]["ownerReferences"][0]["name"] for p in live(sets)} == {"others"}


def test_an_orphan_delete_keeps_the_replicaset_without_that_owner(cluster):
    sets, jobs = cluster
    job = jobs.create("ns", {"metadata": {"name": "launcher"}})
    sets.create("ns", rs("workers", [{"kind": "Job", "uid": job["metadata"]["uid"]}, {"kind": "X", "uid": "x"}]))
    jobs.delete("ns", "launcher", "Orphan")
    assert sets.get("ns", "workers")["metadata"]["ownerReferences"] == [{"kind": "X", "uid": "x"}]


@pytest.mark.parametrize("body,error", [
    (None, BadRequest), ({"metadata": []}, BadRequest), ({"metadata": {}}, Invalid),
    ({"metadata": {"name": "t"}}, Invalid), ({"metadata": {"name": "t"}, "template": {"spec": {}}}, Invalid),
])
def test_a_bad_pod_template_is_refused(body, error):
    with pytest.raises(error):
        Objects("podtemplates", "v1", "PodTemplate").create("ns", body)


def test_names_are_unique_and_a_bad_propagation_policy_is_refused(cluster):
    _, jobs = cluster
    jobs.create("ns", {"metadata": {"name": "j"}})
    with pytest.raises(AlreadyExists):
        jobs.create("ns", {"metadata": {"name": "j"}})
    with pytest.raises(BadRequest, match="propagationPolicy"):
        jobs.delete("ns", "j", "Sometimes")
    assert jobs.get("ns", "j")["metadata"]["name"] == "j"
