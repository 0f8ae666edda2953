"""apps/v1 ReplicaSets for the local cluster: the objects, their ``scale`` subresource and the
controller that keeps each one's pods at ``spec.replicas`` -- the smallest faithful piece the
launcher's worker scaler (``elastic.scaler.scale_workers``) needs, through the official client.

``ReplicaSets(service)`` holds the objects in memory (no watch, no history; a resourceVersion
per object): ``create``, ``get``, ``in_namespace`` (a list), ``patch`` (merge, JSON and
strategic merge patches; on the object or its ``scale``), ``replace``, ``delete`` (the set goes
at once; its pods are deleted with it, as a background cascade does) and ``scale``. A set's
``metadata.ownerReferences`` are kept as sent; ``collect(namespace, uid, orphan)`` is the garbage
collector's cascade when that owner is deleted (``localcluster.objects``): every set that names
``uid`` as an owner is deleted with its pods, or, with ``orphan``, loses that reference.
``reconcile()`` is the controller's pass: for each set, the active pods its selector matches
and that it owns (not being deleted, not Succeeded or Failed: a pod whose sshd could not start
or exited is replaced, as the ReplicaSet controller replaces a failed pod, and stays as it is)
are counted; missing ones are made from ``spec.template`` (``generateName`` ``<set>-``, an
ownerReference to the set with ``controller: true``); surplus ones are deleted, in the
ReplicaSet controller's order: unscheduled (no node) before scheduled, Pending before Running,
not Ready before Ready, the newest first. ``status`` (replicas, readyReplicas,
availableReplicas, observedGeneration) follows. Not modelled: adoption of orphans, pod-deletion
cost, minReadySeconds, conditions, watches of ReplicaSets.
"""
from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from . import patch as patching
from . import pods
from .core import PodService
from .errors import AlreadyExists, BadRequest, Invalid, NotFound
from .selectors import parse_labels
from .store import Scope

KIND = "replicasets"
TERMINAL = ("Succeeded", "Failed")  # phases of pods the controller no longer counts


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _selector_text(match_labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def _valid(body: object, namespace: str, name: str | None = None) -> dict:
    """``body`` checked as a ReplicaSet: a name, ``spec.selector.matchLabels`` that the
    template's labels satisfy, a template with containers, replicas a count; Invalid otherwise."""
    if not (isinstance(body, dict) and isinstance(body.get("metadata"), dict) and isinstance(body.get("spec"), dict)):
        raise BadRequest("the body must be a ReplicaSet object", kind=KIND)
    meta, spec = body["metadata"], body["spec"]
    name = name or meta.get("name")
    if not isinstance(name, str) or not name:
        raise Invalid("ReplicaSet is invalid: metadata.name: Required value", kind=KIND)
    selector = (spec.get("selector") or {}).get("matchLabels") if isinstance(spec.get("selector"), dict) else None
    if not isinstance(selector, dict) or not selector:
        raise Invalid(f'ReplicaSet "{name}" is invalid: spec.selector: Required value (matchLabels only here)',
                      name=name, kind=KIND)
    template = spec.get("template")
    labels = ((template or {}).get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    if not isinstance(labels, dict) or not selector.items() <= labels.items():
        raise Invalid(f'ReplicaSet "{name}" is invalid: spec.template.metadata.labels: Invalid value: '
                      "`selector` does not match template `labels`", name=name, kind=KIND)
    if not isinstance((template.get("spec") or {}).get("containers"), list):
        raise Invalid(f'ReplicaSet "{name}" is invalid: spec.template.spec.containers: Required value',
                      name=name, kind=KIND)
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise Invalid(f'ReplicaSet "{name}" is invalid: spec.replicas: Invalid value: {replicas!r}: must be '
                      "greater than or equal to 0", name=name, kind=KIND)
    return body


def _deletion_rank(pod: dict) -> tuple:
    """Sort key: the pod to delete first sorts first (the ReplicaSet controller's order)."""
    status = pod.get("status") or {}
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase")), 0)
    created = (pod.get("metadata") or {}).get("creationTimestamp") or ""
    return (bool((pod.get("spec") or {}).get("nodeName")), phase_rank, pods.is_ready(pod),
            # newest first: reverse the timestamp's order
            tuple(-ord(ch) for ch in created))


class ReplicaSets:
    """The ReplicaSets of one cluster over its ``PodService`` (module docstring)."""

    def __init__(self, service: PodService, clock: Callable[[], datetime] = _now,
                 new_uid: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.service = service
        self.clock = clock
        self._new_uid = new_uid
        self._items: dict[tuple[str, str], dict] = {}
        self._rv = 0

    def _bump(self, obj: dict) -> dict:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        return copy.deepcopy(obj)

    # -- reads -----------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> dict:
        found = self._items.get((namespace, name))
        if found is None:
            raise NotFound(f'replicasets.apps "{name}" not found', name=name, kind=KIND)
        return copy.deepcopy(found)

    def in_namespace(self, namespace: str | None) -> list[dict]:
        return [copy.deepcopy(o) for (ns, _), o in sorted(self._items.items()) if namespace in (None, ns)]

    def scale(self, namespace: str, name: str) -> dict:
        """The ``autoscaling/v1`` Scale of the set."""
        rs = self.get(namespace, name)
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: rs["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                           "creationTimestamp")},
                "spec": {"replicas": rs["spec"]["replicas"]},
                "status": {"replicas": rs["status"].get("replicas", 0),
                           "selector": _selector_text(rs["spec"]["selector"]["matchLabels"])}}

    # -- writes ----------------------------------------------------------------------------
    def create(self, namespace: str, body: object) -> dict:
        rs = copy.deepcopy(_valid(body, namespace))
        meta = rs["metadata"]
        if (namespace, meta["name"]) in self._items:
            raise AlreadyExists(f'replicasets.apps "{meta["name"]}" already exists', name=meta["name"], kind=KIND)
        for server_field in ("resourceVersion", "deletionTimestamp", "uid"):
            meta.pop(server_field, None)
        meta.update(namespace=namespace, uid=self._new_uid(), creationTimestamp=pods.rfc3339(self.clock()),
                    generation=1)
        rs["spec"].setdefault("replicas", 1)
        rs["status"] = {"replicas": 0}
        self._items[(namespace, meta["name"])] = rs
        return self._bump(rs)

    def _write(self, namespace: str, name: str, new: object) -> dict:
        old = self._items.get((namespace, name))
        if old is None:
            raise NotFound(f'replicasets.apps "{name}" not found', name=name, kind=KIND)
        spec = new.get("spec") if isinstance(new, dict) else None
        if isinstance(spec, dict) and spec.get("selector") != old["spec"]["selector"]:
            raise Invalid(f'ReplicaSet "{name}" is invalid: spec.selector: Invalid value: field is immutable',
                          name=name, kind=KIND)
        new = copy.deepcopy(_valid(new, namespace, name))
        for immutable in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            new["metadata"][immutable] = old["metadata"][immutable]
        new["status"] = old["status"]
        if new["spec"] != old["spec"]:
            new["metadata"]["generation"] = old["metadata"]["generation"] + 1
        self._items[(namespace, name)] = new
        return self._bump(new)

    def patch(self, namespace: str, name: str, content_type: str, raw: bytes,
              subresource: str | None = None) -> dict:
        if subresource == "scale":
            scale = patching.apply(content_type, self.scale(namespace, name), raw)
            self.set_replicas(namespace, name, (scale.get("spec") or {}).get("replicas"))
            return self.scale(namespace, name)
        return self._write(namespace, name, patching.apply(content_type, self.get(namespace, name), raw))

    def replace(self, namespace: str, name: str, body: object, subresource: str | None = None) -> dict:
        if subresource == "scale":
            spec = body.get("spec") if isinstance(body, dict) else None
            self.set_replicas(namespace, name, spec.get("replicas") if isinstance(spec, dict) else None)
            return self.scale(namespace, name)
        return self._write(namespace, name, body)

    def set_replicas(self, namespace: str, name: str, replicas: object) -> None:
        rs = self.get(namespace, name)
        rs["spec"]["replicas"] = replicas
        self._write(namespace, name, rs)

    def delete(self, namespace: str, name: str) -> dict:
        """Remove the set now and delete its pods (a background cascade)."""
        rs = self.get(namespace, name)
        del self._items[(namespace, name)]
        for pod in self._owned(rs):
            self.service.delete(namespace, pod["metadata"]["name"], None)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "apps", "kind": KIND, "uid": rs["metadata"]["uid"]}}

    def collect(self, namespace: str, owner_uid: str, orphan: bool = False) -> list[str]:
        """The garbage collector for a deleted owner: the names of the sets in ``namespace``
        that named ``owner_uid`` among their ownerReferences; each is deleted (its pods with it),
        or with ``orphan`` keeps running without that reference."""
        dependents = []
        for (ns, name), rs in sorted(self._items.items()):
            refs = rs["metadata"].get("ownerReferences")
            refs = refs if isinstance(refs, list) else []
            if ns != namespace or not any(isinstance(r, dict) and r.get("uid") == owner_uid for r in refs):
                continue
            dependents.append(name)
            if orphan:
                rs["metadata"]["ownerReferences"] = [r for r in refs if not (isinstance(r, dict)
                                                                             and r.get("uid") == owner_uid)]
                self._bump(rs)
            else:
                self.delete(ns, name)
        return dependents

    # -- the controller --------------------------------------------------------------------
    def _owned(self, rs: dict) -> list[dict]:
        meta = rs["metadata"]
        scope = Scope(meta["namespace"], parse_labels(_selector_text(rs["spec"]["selector"]["matchLabels"])))
        items, _ = self.service.list(scope)
        return [p for p in items if any(o.get("uid") == meta["uid"] for o in p["metadata"].get("ownerReferences", []))]

    def reconcile(self) -> None:
        """One pass of the controller over every set (module docstring)."""
        for key in list(self._items):
            rs = self._items.get(key)
            if rs is not None:
                self._reconcile_one(rs)

    def _reconcile_one(self, rs: dict) -> None:
        meta, spec = rs["metadata"], rs["spec"]
        live = [p for p in self._owned(rs) if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in TERMINAL]
        want = spec["replicas"]
        if len(live) < want:
            owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"], "uid": meta["uid"],
                     "controller": True, "blockOwnerDeletion": True}
            template = spec["template"]
            for _ in range(want - len(live)):
                body = {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {**copy.deepcopy(template.get("metadata") or {}),
                                     "generateName": meta["name"] + "-", "ownerReferences": [owner]},
                        "spec": copy.deepcopy(template["spec"])}
                body["metadata"].pop("name", None)
                live.append(self.service.create(meta["namespace"], body))
        elif len(live) > want:
            for pod in sorted(live, key=_deletion_rank)[:len(live) - want]:
                self.service.delete(meta["namespace"], pod["metadata"]["name"], None)
                live.remove(pod)
        ready = sum(1 for p in live if pods.is_ready(p))
        status = {"replicas": len(live), "readyReplicas": ready, "availableReplicas": ready,
                  "fullyLabeledReplicas": len(live), "observedGeneration": meta["generation"]}
        if status != rs["status"]:
            rs["status"] = status
            self._bump(rs)


def body_of(raw: bytes) -> object:
    """A request body as JSON (None when empty); BadRequest when it is not JSON."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"error decoding the body as JSON: {exc}", kind=KIND) from exc
