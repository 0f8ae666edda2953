"""coordination.k8s.io/v1 Leases for the local cluster: what a leader election needs, with the
answers a real API server gives, through the official client (``CoordinationV1Api``).

``Leases(clock, new_uid)`` holds the objects in memory (no watch, no history; one
resourceVersion counter for all of them):

- ``create(namespace, body)``: 201 with the stored object; 409 ``AlreadyExists`` when one of
  that name exists; 422 ``Invalid`` for a bad name or spec (below); 400 for a body that is not
  a Lease object.
- ``get(namespace, name)``: the object; 404 ``NotFound``.
- ``in_namespace(namespace)``: the objects, sorted by name (``None``: every namespace).
- ``replace(namespace, name, body)``: an update. A ``metadata.resourceVersion`` in the body
  that is not the stored one is 409 ``Conflict`` -- the optimistic lock a leader election
  relies on; none at all is an unconditional update (as the real Lease strategy allows). The
  name in the body must be the path's (400).
- ``patch(namespace, name, content_type, raw)``: merge, JSON or strategic merge patch; a
  patch that sets ``metadata.resourceVersion`` to another value than the stored one is 409.
- ``delete(namespace, name)``: the object goes at once; a ``Status`` of success; 404.
- ``table(leases, now)``: kubectl's server-side Table (NAME, HOLDER, AGE).

Every write bumps the object's ``resourceVersion``; ``uid``, ``creationTimestamp``, the name
and namespace are the server's. The spec is checked as the API server's validation does:
``holderIdentity`` a string, ``leaseDurationSeconds`` a positive integer,
``leaseTransitions`` a non-negative integer, ``acquireTime``/``renewTime`` RFC 3339 strings
(MicroTime), ``preferredHolder``/``strategy`` strings; unknown spec fields are dropped, as a
real server's decoder does.
"""
from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from . import patch as patching
from . import pods
from .errors import AlreadyExists, BadRequest, Conflict, Invalid, NotFound

KIND = "leases"
GROUP = "coordination.k8s.io"
API_VERSION = f"{GROUP}/v1"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # an RFC 1123 subdomain
_MICROTIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_STRING_FIELDS = ("holderIdentity", "acquireTime", "renewTime", "preferredHolder", "strategy")
_INT_FIELDS = ("leaseDurationSeconds", "leaseTransitions")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _invalid(name: str, field: str, why: str) -> Invalid:
    return Invalid(f'Lease.{GROUP} "{name}" is invalid: {field}: {why}', name=name, kind=KIND)


def _checked_spec(name: str, spec: object) -> dict:
    """``spec`` as the server stores it (known fields only), or Invalid naming the field."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise _invalid(name, "spec", "must be an object")
    out: dict = {}
    for key in _STRING_FIELDS:
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _invalid(name, f"spec.{key}", f"Invalid value: {value!r}: must be a string")
        if key.endswith("Time") and not _MICROTIME.match(value):
            raise _invalid(name, f"spec.{key}", f"Invalid value: {value!r}: must be an RFC 3339 time")
        out[key] = value
    for key in _INT_FIELDS:
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _invalid(name, f"spec.{key}", f"Invalid value: {value!r}: must be an integer")
        if key == "leaseDurationSeconds" and value <= 0:
            raise _invalid(name, f"spec.{key}", f"Invalid value: {value}: must be greater than 0")
        if value < 0:
            raise _invalid(name, f"spec.{key}", f"Invalid value: {value}: must be greater than or equal to 0")
        out[key] = value
    return out


def _metadata(body: object) -> dict:
    if not (isinstance(body, dict) and isinstance(body.get("metadata"), dict)):
        raise BadRequest("the body must be a Lease object", kind=KIND)
    return body["metadata"]


class Leases:
    """The Leases of one cluster (module docstring). Not thread-safe: the API's event loop owns it."""

    def __init__(self, clock: Callable[[], datetime] = _now,
                 new_uid: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.clock = clock
        self._new_uid = new_uid
        self._items: dict[tuple[str, str], dict] = {}
        self._rv = 0

    def _store(self, obj: dict) -> dict:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        meta = obj["metadata"]
        self._items[(meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    # -- reads -----------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> dict:
        found = self._items.get((namespace, name))
        if found is None:
            raise NotFound(f'leases.{GROUP} "{name}" not found', name=name, kind=KIND)
        return copy.deepcopy(found)

    def in_namespace(self, namespace: str | None) -> list[dict]:
        return [copy.deepcopy(o) for (ns, _), o in sorted(self._items.items()) if namespace in (None, ns)]

    @property
    def resource_version(self) -> int:
        return self._rv

    # -- writes ----------------------------------------------------------------------------
    def create(self, namespace: str, body: object) -> dict:
        meta = _metadata(body)
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise Invalid(f"Lease.{GROUP} is invalid: metadata.name: Required value", kind=KIND)
        if not _NAME.match(name):
            raise _invalid(name, "metadata.name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 subdomain")
        if (namespace, name) in self._items:
            raise AlreadyExists(f'leases.{GROUP} "{name}" already exists', name=name, kind=KIND)
        assert isinstance(body, dict)
        spec = _checked_spec(name, body.get("spec"))
        new_meta = {k: copy.deepcopy(v) for k, v in meta.items()
                    if k in ("labels", "annotations", "ownerReferences")}
        new_meta.update(name=name, namespace=namespace, uid=self._new_uid(),
                        creationTimestamp=pods.rfc3339(self.clock()))
        return self._store({"kind": "Lease", "apiVersion": API_VERSION, "metadata": new_meta, "spec": spec})

    def replace(self, namespace: str, name: str, body: object) -> dict:
        old = self.get(namespace, name)
        meta = _metadata(body)
        if meta.get("name") not in (None, name):
            raise BadRequest(f"the name of the object ({meta.get('name')!r}) does not match the name on the URL "
                             f"({name!r})", name=name, kind=KIND)
        given = meta.get("resourceVersion")
        if given not in (None, "") and given != old["metadata"]["resourceVersion"]:
            raise Conflict(f'Operation cannot be fulfilled on leases.{GROUP} "{name}": the object has been '
                           "modified; please apply your changes to the latest version and try again",
                           name=name, kind=KIND)
        assert isinstance(body, dict)
        spec = _checked_spec(name, body.get("spec"))
        new_meta = {k: copy.deepcopy(v) for k, v in meta.items()
                    if k in ("labels", "annotations", "ownerReferences")}
        for kept in ("name", "namespace", "uid", "creationTimestamp"):
            new_meta[kept] = old["metadata"][kept]
        return self._store({"kind": "Lease", "apiVersion": API_VERSION, "metadata": new_meta, "spec": spec})

    def patch(self, namespace: str, name: str, content_type: str, raw: bytes) -> dict:
        current = self.get(namespace, name)
        patched = patching.apply(content_type, current, raw)
        return self.replace(namespace, name, patched)

    def delete(self, namespace: str, name: str) -> dict:
        old = self.get(namespace, name)
        del self._items[(namespace, name)]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": GROUP, "kind": KIND, "uid": old["metadata"]["uid"]}}


def body_of(raw: bytes) -> object:
    """A request body as JSON (None when empty); BadRequest when it is not JSON."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"error decoding the body as JSON: {exc}", kind=KIND) from exc


def table(leases: list[dict], now: datetime, include: str = "Metadata", resource_version: str = "") -> dict:
    """kubectl's server-side Table (meta.k8s.io/v1) for ``leases``: NAME, HOLDER, AGE, as a real
    server prints them; ``include`` is ``includeObject`` (None, Metadata or Object)."""
    rows = []
    for lease in leases:
        row: dict[str, object] = {"cells": [lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity")
                                            or "", pods.age(lease["metadata"].get("creationTimestamp"), now)]}
        if include == "Object":
            row["object"] = lease
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": lease["metadata"]}
        rows.append(row)
    columns = (("Name", "string", "name"), ("Holder", "string", ""), ("Age", "string", ""))
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": n, "priority": 0}
                                  for n, t, f in columns],
            "rows": rows}
