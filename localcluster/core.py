"""The pod API's operations, independent of HTTP (pure apart from the injected clock and ids).

``PodService`` is what the HTTP layer and the in-process kubelet call. Each method returns the
stored object (a dict that must not be mutated) or raises an ``ApiError`` subclass:

- ``create(namespace, body)``                  -> pod;  400, 409 AlreadyExists, 422
- ``get(namespace, name)``                     -> pod;  404
- ``list(scope)``                              -> (pods, resourceVersion)
- ``replace(namespace, name, body, sub)``      -> pod;  400, 404, 409 Conflict, 422 (rv required)
- ``patch(namespace, name, ctype, raw, sub)``  -> pod;  400, 404, 409, 415, 422
- ``delete(namespace, name, grace, preconditions)`` -> pod (marked or removed); 404, 409
- ``bind(namespace, name, node)``               -> pod;  409 if bound to another node
- ``finish_deletion(namespace, name, uid)``    -> removes a marked pod once its finalizers are
  gone (its host stopped, or its grace period ran out); no-op for another incarnation.
- ``update(namespace, name, fn, sub)``          -> applies ``fn(copy)`` (used by the kubelet).

Graceful deletion follows Kubernetes: a pod that is bound to a node and not finished gets
``deletionTimestamp = now + grace`` and ``deletionGracePeriodSeconds``; whoever runs it calls
``finish_deletion`` when it has stopped. A pod with grace 0, never bound, or finished, is removed
at once. A later delete may shorten the grace period, never lengthen it.
"""
from __future__ import annotations

import copy
import json
import secrets
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from . import patch as patching
from . import pods
from .errors import BadRequest, Conflict, Invalid
from .store import Scope, Store

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _default_clock() -> datetime:
    return datetime.now(timezone.utc)


def _random_suffix() -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


class PodService:
    """Pod operations over a ``Store``; ``clock``, ``new_uid`` and ``new_suffix`` are injectable."""

    def __init__(self, store: Store, clock: Callable[[], datetime] = _default_clock,
                 new_uid: Callable[[], str] = lambda: str(uuid.uuid4()),
                 new_suffix: Callable[[], str] = _random_suffix) -> None:
        self.store = store
        self.clock = clock
        self._new_uid = new_uid
        self._new_suffix = new_suffix
        self._stopped: set[str] = set()  # uids whose host has stopped (removal waits on finalizers)

    # -- reads ---------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> dict:
        return self.store.get(namespace, name)

    def list(self, scope: Scope = Scope()) -> tuple[list[dict], int]:
        return self.store.list(scope)

    # -- writes --------------------------------------------------------------------------
    def create(self, namespace: str, body) -> dict:
        for _ in range(8):
            pod = pods.prepare_new(body, namespace, self.clock(), self._new_uid(), self._new_suffix())
            generated = not (body.get("metadata") or {}).get("name")
            if not generated or self.store.find(namespace, pod["metadata"]["name"]) is None:
                return self.store.create(pod)
        raise Conflict("could not generate a unique name; try again")  # pragma: no cover

    def replace(self, namespace: str, name: str, body, subresource: str | None = None) -> dict:
        old = self.store.get(namespace, name)
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise BadRequest("the body must be a Pod object")
        rv = body["metadata"].get("resourceVersion")
        if not rv:
            raise Invalid(f'Pod "{name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
                          "must be specified for an update", name=name)
        self._check_uid(old, body)
        return self._store(old, pods.merge_update(old, body, subresource), rv)

    def patch(self, namespace: str, name: str, content_type: str, raw: bytes,
              subresource: str | None = None) -> dict:
        old = self.store.get(namespace, name)
        patched = patching.apply(content_type, old, raw)
        meta = patched.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        expect = rv if rv and rv != old["metadata"]["resourceVersion"] else None
        self._check_uid(old, patched)
        return self._store(old, pods.merge_update(old, patched, subresource), expect)

    def update(self, namespace: str, name: str, fn: Callable[[dict], dict],
               subresource: str | None = "status") -> dict:
        old = self.store.get(namespace, name)
        return self._store(old, pods.merge_update(old, fn(copy.deepcopy(old)), subresource), None)

    def _check_uid(self, old: dict, new: dict) -> None:
        uid = (new.get("metadata") or {}).get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise Conflict(f'Precondition failed: UID in precondition: {uid}, UID in object meta: '
                           f'{old["metadata"]["uid"]}', name=old["metadata"]["name"])

    def _store(self, old: dict, new: dict, expect_rv: str | None) -> dict:
        if new == old and expect_rv is None:
            return old  # a no-op write does not bump the resourceVersion, as in Kubernetes
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        stored = self.store.replace(new, expect_rv)
        self._maybe_remove(stored)
        return self.store.find(*_key(stored)) or stored

    def bind(self, namespace: str, name: str, node: str) -> dict:
        """Assign an unbound pod to ``node`` (what the scheduler's Binding does); 409 if bound elsewhere."""
        old = self.store.get(namespace, name)
        current = old["spec"].get("nodeName")
        if current == node:
            return old
        if current:
            raise Conflict(f'pod {name} is already assigned to node "{current}"', name=name)
        new = copy.deepcopy(old)
        new["spec"]["nodeName"] = node
        conditions = [c for c in new["status"].get("conditions") or [] if c.get("type") != "PodScheduled"]
        new["status"]["conditions"] = conditions + [pods.condition("PodScheduled", True, self.clock())]
        return self.store.replace(new)

    # -- deletion ------------------------------------------------------------------------
    def delete(self, namespace: str, name: str, grace: int | None = None,
               preconditions: dict | None = None) -> dict:
        pod = self.store.get(namespace, name)
        meta = pod["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise Conflict(f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                           f"{meta['uid']}", name=name)
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise Conflict(f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                           f"ResourceVersion in object meta: {meta['resourceVersion']}", name=name)
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if grace < 0:
            raise Invalid(f"gracePeriodSeconds must be >= 0, got {grace}")
        phase = (pod.get("status") or {}).get("phase")
        if not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
            grace = 0
        now = self.clock()
        deadline = now + timedelta(seconds=grace)
        if meta.get("deletionTimestamp"):
            current = pods.parse_time(meta["deletionTimestamp"])
            if deadline >= current and grace != 0:
                return pod
        if grace == 0 and not meta.get("finalizers"):
            return self.store.remove(namespace, name)  # one DELETED event, as in Kubernetes
        new = copy.deepcopy(pod)
        new["metadata"]["deletionTimestamp"] = pods.rfc3339(deadline)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        stored = self.store.replace(new)
        if grace == 0:
            self._stopped.add(meta["uid"])
            return self._maybe_remove(stored) or stored
        return stored

    def finish_deletion(self, namespace: str, name: str, uid: str) -> None:
        """The host of pod ``uid`` stopped: remove it (now, or when its finalizers are gone)."""
        pod = self.store.find(namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or not pod["metadata"].get("deletionTimestamp"):
            return
        self._stopped.add(uid)
        self._maybe_remove(pod)

    def _maybe_remove(self, pod: dict) -> dict | None:
        meta = pod["metadata"]
        if meta["uid"] in self._stopped and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._stopped.discard(meta["uid"])
            return self.store.remove(meta["namespace"], meta["name"])
        return None


def _key(pod: dict) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def dumps(obj) -> bytes:
    """Compact JSON, as the API server writes it."""
    return json.dumps(obj, separators=(",", ":")).encode()
