"""localcluster.replicasets: the objects and their scale, and the controller's pass: pods from
the template owned by the set, surplus removed in the ReplicaSet controller's order (not yet
scheduled, then not Ready, before Ready ones), the set's pods deleted with it."""
import json
from datetime import datetime, timezone

import pytest

from localcluster import pods
from localcluster.core import PodService
from localcluster.errors import Invalid, NotFound
from localcluster.replicasets import ReplicaSets
from localcluster.store import Store

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
LABELS = {"app": "w"}
MERGE = "application/merge-patch+json"


@pytest.fixture
def sets():
    ids, suffixes = iter(range(1000)), iter(range(1000))
    svc = PodService(Store(), clock=lambda: T0, new_uid=lambda: f"uid-{next(ids)}",
                     new_suffix=lambda: f"s{next(suffixes):04d}")
    return ReplicaSets(svc, clock=lambda: T0, new_uid=lambda: "rs-uid")


def rs(replicas=None, labels=LABELS):
    spec: dict = {"selector": {"matchLabels": LABELS},
                  "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "w"}, "spec": spec}


def live(sets):
    items, _ = sets.service.list()
    return sorted(p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp"))


def test_a_set_defaults_to_one_replica_and_makes_owned_pods_from_its_template(sets):
    made = sets.create("default", rs())
    assert made["spec"]["replicas"] == 1 and made["metadata"]["uid"] == "rs-uid"
    sets.reconcile()
    (name,) = live(sets)
    pod = sets.service.get("default", name)
    assert name.startswith("w-") and pod["metadata"]["labels"] == LABELS
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w",
                                                   "uid": "rs-uid", "controller": True, "blockOwnerDeletion": True}]
    assert sets.get("default", "w")["status"]["replicas"] == 1


def test_a_template_its_selector_does_not_match_is_invalid(sets):
    with pytest.raises(Invalid, match="does not match template"):
        sets.create("default", rs(labels={"app": "other"}))
    with pytest.raises(NotFound):
        sets.get("default", "w")


def test_the_scale_patch_grows_the_set_and_a_shrink_removes_unready_pods_first(sets):
    sets.create("default", rs(2))
    sets.reconcile()
    ready = live(sets)
    for name in ready:  # the kubelet ran them: bound and Ready
        sets.service.bind("default", name, "local")
        sets.service.update("default", name, lambda p: {**p, "status": pods.running_status(p, "10.0.0.1", "10.0.0.1",
                                                                                             T0, T0)})
    scale = sets.patch("default", "w", MERGE, json.dumps({"spec": {"replicas": 4}}).encode(), "scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 4
    sets.reconcile()
    assert len(live(sets)) == 4
    sets.patch("default", "w", MERGE, json.dumps({"spec": {"replicas": 2}}).encode(), "scale")
    sets.reconcile()
    assert live(sets) == ready  # the two Pending ones went, not the Ready ones
    status = sets.get("default", "w")["status"]
    assert (status["replicas"], status["readyReplicas"]) == (2, 2)


def test_an_owner_reference_patch_and_deletion_of_the_set(sets):
    sets.create("default", rs(2))
    sets.reconcile()
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid", "blockOwnerDeletion": True}
    patched = sets.patch("default", "w", MERGE, json.dumps({"metadata": {"ownerReferences": [owner]}}).encode())
    assert patched["metadata"]["ownerReferences"] == [owner] and patched["metadata"]["generation"] == 1
    with pytest.raises(Invalid, match="immutable"):
        sets.patch("default", "w", MERGE, json.dumps({"spec": {"selector": {"matchLabels": {"a": "b"}}}}).encode())
    sets.delete("default", "w")
    assert live(sets) == [] and sets.in_namespace("default") == []


def test_a_failed_pod_is_replaced_and_left_as_it_is(sets):
    """A pod whose host could not start (the kubelet reports it Failed) no longer counts: the
    set makes a new one, as the ReplicaSet controller does; the failed one stays, and a
    shrink leaves it alone."""
    sets.create("default", rs(replicas=1))
    sets.reconcile()
    (failed,) = live(sets)
    sets.service.update("default", failed, lambda pod: dict(pod, status=pods.failed_status(
        pod, "sshd exited with code 1", T0, 1)))
    sets.reconcile()
    names = live(sets)
    assert len(names) == 2 and failed in names
    assert sets.get("default", "w")["status"]["replicas"] == 1
    sets.patch("default", "w", MERGE, json.dumps({"spec": {"replicas": 0}}).encode())
    sets.reconcile()
    assert live(sets) == [failed]
