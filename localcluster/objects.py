"""Objects the local cluster stores but runs no controller for: core/v1 ``PodTemplates``,
batch/v1 ``Jobs`` and core/v1 ``Events`` (create and list only through the API), and the
garbage collector's cascade from an owner to its dependents -- what
the launcher's worker scaler (``elastic.scaler.scale_workers``) needs to make the workers'
ReplicaSet from a PodTemplate, owned by its Job from birth, through the official client.

``Objects(kind, group, owned)`` holds the objects of one kind in memory (no watch, no history;
a resourceVersion per object): ``create`` (a uid, a creationTimestamp; a Job's ``spec.suspend``
and ``status`` kept as sent or empty), ``get``, ``in_namespace`` and ``delete``. Bodies are
checked where they enter: a JSON object with ``metadata.name`` a non-empty string, and for a
PodTemplate a ``template`` with ``spec.containers`` (Invalid otherwise).

Garbage collection: ``delete(namespace, name, propagation)`` calls ``owned`` (the dependents'
collector, ``ReplicaSets.collect`` in the daemon) with the deleted object's uid: with
``Background`` or ``Foreground`` (the default: Background, as for a Job through the API; kubectl
sends Background) every ReplicaSet whose ownerReferences name that uid is deleted with its pods;
``Orphan`` drops that ownerReference from them instead. A Job here never makes pods: the test
or the user runs its containers (the scaler) as a kubelet would. Not modelled: update, patch,
watch, the Job controller, finalizers, a foreground delete's wait (the dependents go at once).
"""
from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from . import pods
from .errors import AlreadyExists, BadRequest, Invalid, NotFound

PROPAGATION = ("Background", "Foreground", "Orphan")


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Objects:
    """The objects of one kind (``podtemplates``, ``jobs``) in one cluster (module docstring).
    ``owned(namespace, uid, orphan)`` is called when an object is deleted: it deletes (or, with
    ``orphan``, releases) the dependents that name ``uid`` as an owner."""

    def __init__(self, kind: str, api_version: str, singular: str,
                 owned: Callable[[str, str, bool], object] | None = None,
                 clock: Callable[[], datetime] = _now,
                 new_uid: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.kind = kind
        self.api_version = api_version
        self.singular = singular
        self.owned = owned
        self.clock = clock
        self._new_uid = new_uid
        self._items: dict[tuple[str, str], dict] = {}
        self._rv = 0

    def _valid(self, body: object) -> dict:
        if not (isinstance(body, dict) and isinstance(body.get("metadata"), dict)):
            raise BadRequest(f"the body must be a {self.singular} object", kind=self.kind)
        name = body["metadata"].get("name")
        if not isinstance(name, str) or not name:
            raise Invalid(f"{self.singular} is invalid: metadata.name: Required value", kind=self.kind)
        if self.kind == "podtemplates":
            template = body.get("template")
            spec = template.get("spec") if isinstance(template, dict) else None
            if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
                raise Invalid(f'PodTemplate "{name}" is invalid: template.spec.containers: Required value',
                              name=name, kind=self.kind)
        return body

    def create(self, namespace: str, body: object) -> dict:
        """Store a new object; AlreadyExists, Invalid or BadRequest."""
        obj = copy.deepcopy(self._valid(body))
        meta = obj["metadata"]
        if (namespace, meta["name"]) in self._items:
            raise AlreadyExists(f'{self.kind} "{meta["name"]}" already exists', name=meta["name"], kind=self.kind)
        for server_field in ("resourceVersion", "deletionTimestamp", "uid"):
            meta.pop(server_field, None)
        meta.update(namespace=namespace, uid=self._new_uid(), creationTimestamp=pods.rfc3339(self.clock()))
        obj["apiVersion"], obj["kind"] = self.api_version, self.singular
        if self.kind == "jobs":
            obj.setdefault("spec", {})
            obj["status"] = {}
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        self._items[(namespace, meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, namespace: str, name: str) -> dict:
        found = self._items.get((namespace, name))
        if found is None:
            raise NotFound(f'{self.kind} "{name}" not found', name=name, kind=self.kind)
        return copy.deepcopy(found)

    def in_namespace(self, namespace: str | None) -> list[dict]:
        return [copy.deepcopy(o) for (ns, _), o in sorted(self._items.items()) if namespace in (None, ns)]

    def delete(self, namespace: str, name: str, propagation: str | None = None) -> dict:
        """Remove the object now; its dependents are deleted with it, or orphaned (module
        docstring). BadRequest for an unknown ``propagation``."""
        if propagation not in (None, *PROPAGATION):
            raise BadRequest(f"propagationPolicy must be one of {', '.join(PROPAGATION)}, got {propagation!r}",
                             kind=self.kind)
        obj = self.get(namespace, name)
        del self._items[(namespace, name)]
        if self.owned is not None:
            self.owned(namespace, obj["metadata"]["uid"], propagation == "Orphan")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "kind": self.kind, "uid": obj["metadata"]["uid"]}}
