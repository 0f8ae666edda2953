"""The object store: pods, one global resourceVersion, a bounded event history (pure).

The store is single-threaded and synchronous (the API server calls it from its event loop).
Stored objects are never mutated in place: every write stores a fresh dict, so an object or
an event handed out stays valid; callers must not mutate what they receive.

- Every write (create, replace, remove) increments the global resourceVersion, stamps it on
  the object (``metadata.resourceVersion``) and appends an ``Event`` to the history.
- The history keeps the last ``history_limit`` events. ``events_since(rv)`` returns the
  events after ``rv``, or raises ``Expired`` (410) when events after ``rv`` were dropped
  (by the limit or by ``compact()``).
- Subscribers (``subscribe(fn)``) are called synchronously with each new ``Event``.
- ``watch_view(event, scope)`` turns a raw event into what one watcher sees: with selectors,
  an object that starts matching arrives as ADDED and one that stops matching as DELETED.
"""
from __future__ import annotations

import builtins
import collections
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import AlreadyExists, Conflict, Expired, NotFound
from .selectors import FieldSelector, LabelSelector


@dataclass(frozen=True)
class Event:
    """One write: ``type`` ADDED, MODIFIED or DELETED; ``previous`` is the object before it."""

    type: str
    object: dict
    previous: dict | None
    resource_version: int


@dataclass(frozen=True)
class Scope:
    """What a list or watch asks for: a namespace (None = all) and label and field selectors."""

    namespace: str | None = None
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)


def watch_view(event: Event, scope: Scope) -> tuple[str, dict] | None:
    """The (type, object) a watcher with ``scope`` receives for ``event``, or None."""
    now, before = scope.matches(event.object), scope.matches(event.previous)
    if event.type == "DELETED":
        return ("DELETED", event.object) if now or before else None
    if now and before:
        return ("MODIFIED", event.object)
    if now:
        return ("ADDED", event.object)
    if before:
        return ("DELETED", event.object)
    return None


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "default", meta["name"]


class Store:
    """Pods by (namespace, name) with a global resourceVersion and a bounded history."""

    def __init__(self, history_limit: int = 1000) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit must be >= 1, got {history_limit}")
        self._objects: dict[tuple[str, str], dict] = {}
        self._rv = 0
        self._history: collections.deque[Event] = collections.deque(maxlen=history_limit)
        self._compacted = 0  # events with resource_version <= this one are gone
        self._subscribers: dict[int, Callable[[Event], None]] = {}
        self._next_token = 0

    @property
    def resource_version(self) -> int:
        """The resourceVersion of the latest write (0 before any)."""
        return self._rv

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, namespace: str, name: str) -> dict:
        """The stored pod; raises NotFound."""
        try:
            return self._objects[(namespace, name)]
        except KeyError:
            raise NotFound(f'pods "{name}" not found', name=name) from None

    def find(self, namespace: str, name: str) -> dict | None:
        """The stored pod or None."""
        return self._objects.get((namespace, name))

    # builtins.list in the annotations: inside this class ``list`` names the method below
    def list(self, scope: Scope = Scope()) -> tuple[builtins.list[dict], int]:
        """The matching pods sorted by (namespace, name), and the current resourceVersion."""
        name = scope.fields.value_of("metadata.name")
        if name is not None and scope.namespace is not None:
            candidates = [o for o in [self._objects.get((scope.namespace, name))] if o is not None]
        else:
            candidates = [self._objects[k] for k in sorted(self._objects)]
        return [o for o in candidates if scope.matches(o)], self._rv

    def create(self, obj: dict) -> dict:
        """Store a new pod (``obj`` is not kept); raises AlreadyExists."""
        key = _key(obj)
        if key in self._objects:
            raise AlreadyExists(f'pods "{key[1]}" already exists', name=key[1])
        return self._write("ADDED", key, obj, None)

    def replace(self, obj: dict, expect_rv: str | None = None) -> dict:
        """Store a new version of an existing pod; Conflict when ``expect_rv`` is stale."""
        key = _key(obj)
        old = self.get(*key)
        if expect_rv is not None and expect_rv != old["metadata"]["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on pods "{key[1]}": the object has been modified; '
                f"please apply your changes to the latest version and try again", name=key[1])
        return self._write("MODIFIED", key, obj, old)

    def remove(self, namespace: str, name: str) -> dict:
        """Remove a pod; the DELETED event carries it with a new resourceVersion."""
        old = self.get(namespace, name)
        return self._write("DELETED", (namespace, name), old, old)

    def _write(self, kind: str, key: tuple[str, str], obj: dict, old: dict | None) -> dict:
        self._rv += 1
        new = dict(obj)
        new["metadata"] = dict(obj["metadata"], resourceVersion=str(self._rv))
        if kind == "DELETED":
            del self._objects[key]
        else:
            self._objects[key] = new
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].resource_version
        event = Event(kind, new, old, self._rv)
        self._history.append(event)
        for fn in list(self._subscribers.values()):
            fn(event)
        return new

    def events_since(self, rv: int) -> builtins.list[Event]:
        """Events with resourceVersion > ``rv``; Expired when some of them were dropped."""
        if rv < self._compacted:
            raise Expired(f"too old resource version: {rv} ({self._compacted})")
        return [e for e in self._history if e.resource_version > rv]

    def compact(self) -> None:
        """Forget the whole history: a watch from any older resourceVersion gets 410."""
        self._history.clear()
        self._compacted = self._rv

    def subscribe(self, fn: Callable[[Event], None]) -> int:
        """Call ``fn(event)`` after every write until ``unsubscribe(token)``."""
        self._next_token += 1
        self._subscribers[self._next_token] = fn
        return self._next_token

    def unsubscribe(self, token: int) -> None:
        self._subscribers.pop(token, None)
