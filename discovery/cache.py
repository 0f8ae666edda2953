"""The pod cache: watch events applied one by one, a relist diffed against it.

Pods are kept *slim* (only the fields the host rule reads), keyed by ``namespace/name``.
A relist is compared with the cache like the official client's informer does: pods that
vanished from the list become deletions, so nothing stale survives a missed DELETED event.

Thread-safe: the watch thread writes; the publisher takes ``drain()``, the pods changed since
its last call (work proportional to the changes, not to the cache). ``snapshot()`` returns
every pod as an immutable view (a tuple) and the change counter, for whole-list readers.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from discovery.hosts import GPU_RESOURCE, SLOTS_ANNOTATION


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only what ``discovery.hosts`` and the cache read; a pure copy, API field names."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    slim_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                       "creationTimestamp", "deletionTimestamp", "labels")
                 if k in meta}
    if SLOTS_ANNOTATION in annotations:
        slim_meta["annotations"] = {SLOTS_ANNOTATION: annotations[SLOTS_ANNOTATION]}
    containers = []
    for c in spec.get("containers") or ():
        limit = ((c or {}).get("resources") or {}).get("limits") or {}
        if GPU_RESOURCE in limit:
            containers.append({"resources": {"limits": {GPU_RESOURCE: limit[GPU_RESOURCE]}}})
    slim_spec = {k: spec[k] for k in ("hostname", "subdomain", "nodeName") if k in spec}
    if containers:
        slim_spec["containers"] = containers
    conditions = [{"type": c.get("type"), "status": c.get("status")}
                  for c in status.get("conditions") or () if (c or {}).get("type") == "Ready"]
    slim_status = {k: status[k] for k in ("phase", "podIP") if k in status}
    if conditions:
        slim_status["conditions"] = conditions
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(frozen=True)
class RelistDiff:
    """What a relist changed: keys added, modified (resourceVersion differs) and deleted."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    deleted: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.modified or self.deleted)


class PodCache:
    """Slim pods by ``namespace/name``; ``version`` counts changes. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, dict[str, Any]] = {}
        self._version = 0
        self._view: tuple[dict[str, Any], ...] | None = ()
        self._changes: dict[str, dict[str, Any] | None] = {}  # since the last drain

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Apply one ADDED/MODIFIED/DELETED event; returns whether the cache changed.

        Does not block beyond the lock; raises ``ValueError`` for another event type.
        """
        key = pod_key(pod)
        with self._lock:
            if event_type in ("ADDED", "MODIFIED"):
                self._pods[key] = self._changes[key] = slim_pod(pod)
            elif event_type == "DELETED":
                if self._pods.pop(key, None) is None:
                    return False
                self._changes[key] = None
            else:
                raise ValueError(f"unknown event type {event_type!r}")
            self._version += 1
            self._view = None
            return True

    def replace(self, pods: Iterable[Mapping[str, Any]]) -> RelistDiff:
        """Make the cache exactly ``pods`` (a fresh LIST); returns the diff against before."""
        fresh = {pod_key(p): slim_pod(p) for p in pods}
        with self._lock:
            old = self._pods
            added = tuple(k for k in fresh if k not in old)
            deleted = tuple(k for k in old if k not in fresh)
            modified = tuple(k for k, p in fresh.items() if k in old and old[k] != p)
            diff = RelistDiff(added, modified, deleted)
            self._pods = fresh
            for k in (*added, *modified):
                self._changes[k] = fresh[k]
            for k in deleted:
                self._changes[k] = None
            if diff.changed:
                self._version += 1
                self._view = None
            return diff

    def drain(self) -> tuple[int, dict[str, dict[str, Any] | None]]:
        """``(version, changes)``: each pod key changed since the last ``drain`` -> its pod now
        (``None``: deleted). Hands the changes over (the next call starts empty); one caller."""
        with self._lock:
            changes, self._changes = self._changes, {}
            return self._version, changes

    def snapshot(self) -> tuple[int, tuple[dict[str, Any], ...]]:
        """``(version, pods)``; the tuple is shared and must be treated as read-only."""
        with self._lock:
            if self._view is None:
                self._view = tuple(self._pods.values())
            return self._version, self._view

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
