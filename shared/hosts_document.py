"""The discovery daemon's ``/hosts.json`` document as a typed value: ``discovery.server``
renders it (``to_json``), the launcher parses it (``HostsDocument.parse``).

What the daemon answers is hostile until validated: ``parse`` checks every field it reads
(types, a served host by the project's host rule, slots in 1..``MAX_SLOTS``) and raises
``BadDocument`` (a ``ValueError``) naming the first bad field. A field an older daemon does not
send takes its default; fields it does not know are ignored. Text from the API (pod names,
reasons) is kept as sent: whoever prints it makes it printable.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shared.hosts import MAX_SLOTS, host_ok

T = TypeVar("T")


class BadDocument(ValueError):
    """The answer is not a hosts document; the message names the field."""


@dataclass(frozen=True)
class ServedHost:
    """A host the daemon serves: what horovodrun sees as ``host:slots``, and its pod."""

    host: str
    slots: int
    pod: str = ""
    namespace: str = ""
    uid: str = ""
    ip: str = ""
    group: str | None = None

    def line(self) -> str:
        return f"{self.host}:{self.slots}"


@dataclass(frozen=True)
class SkippedPod:
    """A pod that is not served and will not be as it is (a bad annotation, a failed prepare)."""

    pod: str
    reason: str
    namespace: str = ""
    uid: str = ""


@dataclass(frozen=True)
class PreparingHost:
    """A pod whose host the prepare hook is preparing (keys pinned, dataset synced)."""

    host: str
    pod: str
    uid: str = ""


@dataclass(frozen=True)
class WaitingPod:
    """A pod not served yet, and why: ``reason`` (``not scheduled``, ``not running``, ``not
    ready``, ``failing``, ``no pod IP``...) and ``detail``, what the API says about it (the
    scheduler's message, a container's state; empty from an older daemon)."""

    pod: str
    reason: str
    namespace: str = ""
    detail: str = ""


@dataclass(frozen=True)
class WatchStatus:
    """The daemon's pod watch."""

    connected: bool = False
    lists: int = 0
    relists: int = 0
    restarts: int = 0
    events: int = 0
    last_error: str | None = None
    fatal: str | None = None


@dataclass(frozen=True)
class HostsDocument:
    """See the module docstring; ``waiting`` counts every pod not served by reason, while
    ``waiting_pods`` names at most the daemon's limit of them."""

    synced: bool
    hosts: tuple[ServedHost, ...] = ()
    skipped: tuple[SkippedPod, ...] = ()
    preparing: tuple[PreparingHost, ...] = ()
    waiting_pods: tuple[WaitingPod, ...] = ()
    waiting: Mapping[str, int] = field(default_factory=dict)
    pods_seen: int | None = None
    stale: bool = False
    age_seconds: float | None = None
    stale_after_seconds: float | None = None
    generation: int | None = None
    resource_version: str | None = None
    group_by: str | None = None
    group: str | None = None
    group_known: bool | None = None
    watch: WatchStatus | None = None

    def slots(self) -> int:
        """The slots served."""
        return sum(h.slots for h in self.hosts)

    def host_lines(self) -> tuple[str, ...]:
        """The ``host:slots`` lines served, in the daemon's order (what ``/hosts`` answers)."""
        return tuple(h.line() for h in self.hosts)

    def to_json(self) -> dict[str, Any]:
        """The document as the daemon sends it."""
        return {
            "synced": self.synced, "stale": self.stale, "age_seconds": self.age_seconds,
            "stale_after_seconds": self.stale_after_seconds, "generation": self.generation,
            "resource_version": self.resource_version, "pods_seen": self.pods_seen,
            "group_by": self.group_by, "group": self.group, "group_known": self.group_known,
            "hosts": [{"host": h.host, "slots": h.slots, "pod": h.pod, "namespace": h.namespace,
                       "uid": h.uid, "ip": h.ip, "group": h.group} for h in self.hosts],
            "skipped": [{"pod": k.pod, "namespace": k.namespace, "uid": k.uid, "reason": k.reason}
                        for k in self.skipped],
            "waiting": dict(self.waiting),
            "preparing": [{"host": p.host, "pod": p.pod, "uid": p.uid} for p in self.preparing],
            "waiting_pods": [{"pod": w.pod, "namespace": w.namespace, "reason": w.reason, "detail": w.detail}
                             for w in self.waiting_pods],
            "watch": None if self.watch is None else {
                "connected": self.watch.connected, "lists": self.watch.lists, "relists": self.watch.relists,
                "restarts": self.watch.restarts, "events": self.watch.events,
                "last_error": self.watch.last_error, "fatal": self.watch.fatal},
        }

    @classmethod
    def parse(cls, value: object) -> HostsDocument:
        """The document in ``value`` (decoded JSON); ``BadDocument`` naming the first bad field."""
        doc = _object(value, "the document")
        hosts = tuple(_served(entry, f"hosts[{i}]") for i, entry in enumerate(_list(doc, "hosts")))
        skipped = tuple(SkippedPod(pod=_text(e, "pod", f"skipped[{i}]"), reason=_text(e, "reason", f"skipped[{i}]"),
                                   namespace=_text(e, "namespace", f"skipped[{i}]", ""),
                                   uid=_text(e, "uid", f"skipped[{i}]", ""))
                        for i, e in enumerate(_objects(doc, "skipped")))
        preparing = tuple(PreparingHost(host=_text(e, "host", f"preparing[{i}]"),
                                        pod=_text(e, "pod", f"preparing[{i}]"),
                                        uid=_text(e, "uid", f"preparing[{i}]", ""))
                          for i, e in enumerate(_objects(doc, "preparing")))
        waiting_pods = tuple(WaitingPod(pod=_text(e, "pod", f"waiting_pods[{i}]"),
                                        reason=_text(e, "reason", f"waiting_pods[{i}]"),
                                        namespace=_text(e, "namespace", f"waiting_pods[{i}]", ""),
                                        detail=_text(e, "detail", f"waiting_pods[{i}]", ""))
                             for i, e in enumerate(_objects(doc, "waiting_pods")))
        waiting = _object(doc.get("waiting") or {}, "waiting")
        for reason, count in waiting.items():
            if not _is_count(count):
                raise BadDocument(f"waiting[{reason!r}] is not a count")
        watch = doc.get("watch")
        return cls(
            synced=_typed(doc, "synced", bool, "the document", True), hosts=hosts, skipped=skipped,
            preparing=preparing, waiting_pods=waiting_pods, waiting=dict(waiting),
            pods_seen=_count(doc, "pods_seen"), stale=_typed(doc, "stale", bool, "the document", False),
            age_seconds=_number(doc, "age_seconds"), stale_after_seconds=_number(doc, "stale_after_seconds"),
            generation=_count(doc, "generation"),
            resource_version=_typed(doc, "resource_version", str, "the document", None),
            group_by=_typed(doc, "group_by", str, "the document", None),
            group=_typed(doc, "group", str, "the document", None),
            group_known=_typed(doc, "group_known", bool, "the document", None),
            watch=None if watch is None else _watch(watch),
        )


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadDocument(f"{where} is not a JSON object")
    return value


def _list(doc: dict, name: str) -> list:
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadDocument(f"{name} is not a list")
    return value


def _objects(doc: dict, name: str) -> list[dict[str, Any]]:
    return [_object(e, f"{name}[{i}]") for i, e in enumerate(_list(doc, name))]


def _typed(obj: dict, name: str, kind: type[T], where: str, default: T | None) -> Any:
    value = obj.get(name, default)
    if value is None and default is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadDocument(f"{name} of {where} is not a {kind.__name__}")
    return value


def _text(obj: dict, name: str, where: str, default: str | None = None) -> str:
    value = obj.get(name, default)
    if not isinstance(value, str):
        raise BadDocument(f"{where}.{name} is not a string")
    return value


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(obj: dict, name: str) -> int | None:
    value = obj.get(name)
    if value is not None and not _is_count(value):
        raise BadDocument(f"{name} is not a count")
    return value


def _number(obj: dict, name: str) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadDocument(f"{name} is not a number")
    return float(value)


def _served(value: object, where: str) -> ServedHost:
    entry = _object(value, where)
    host, slots = entry.get("host"), entry.get("slots")
    if not isinstance(host, str) or not host_ok(host):
        raise BadDocument(f"{where}.host is not a host name or IPv4 address")
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
        raise BadDocument(f"{where}.slots is not a slot count (1..{MAX_SLOTS})")
    group = entry.get("group")
    if group is not None and not isinstance(group, str):
        raise BadDocument(f"{where}.group is not a string")
    return ServedHost(host=host, slots=slots, pod=_text(entry, "pod", where, ""),
                      namespace=_text(entry, "namespace", where, ""), uid=_text(entry, "uid", where, ""),
                      ip=_text(entry, "ip", where, ""), group=group)


def _watch(value: object) -> WatchStatus:
    w = _object(value, "watch")
    return WatchStatus(connected=_typed(w, "connected", bool, "watch", False),
                       lists=_count(w, "lists") or 0, relists=_count(w, "relists") or 0,
                       restarts=_count(w, "restarts") or 0, events=_count(w, "events") or 0,
                       last_error=_typed(w, "last_error", str, "watch", None),
                       fatal=_typed(w, "fatal", str, "watch", None))
