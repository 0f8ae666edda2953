"""Where the discovery service's pods come from: the ``HostSource`` seam.

``DiscoveryService`` takes a ``HostSource`` and never knows which one: it starts it, drains
the pods that changed, turns them into hosts with its rules, and serves the result. Two
implementations:

- ``discovery.kube_source.KubernetesSource(api)``: the API server's list + watch of the job's
  pods (``discovery.watch.PodWatcher``) into a ``discovery.cache.PodCache``; the daemon's
  default source.
- ``discovery.file_source.StaticFileSource(path)``: the pods of a JSON file (``kubectl get
  pods -o json``'s ``{"items": [...]}``, or a plain list), read once; a fixed set of hosts
  (``discovery-daemon --pods-file``).

This module is the contract alone: it imports no Kubernetes client, so the service does not.

A new source (Ray nodes, a cloud's instance list) implements the protocol below and hands the
service pod-shaped dicts (``metadata.name/namespace/uid``, ``status.podIP``, the ``Ready``
condition...: what ``discovery.hosts`` reads).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from discovery.status import WatchStatus

Changes = dict[str, "dict[str, Any] | None"]


class HostSource(Protocol):
    """The contract between a source of pods and ``DiscoveryService``.

    - ``start(on_change)`` begins delivering and returns at once; from then on the source
      calls ``on_change()`` (from any thread; it must not block) after ``drain()`` has more to
      hand over. Called once.
    - ``stop(timeout)`` ends delivery; blocks up to ``timeout`` seconds (the service runs it
      in an executor); safe to call twice and before ``start``.
    - ``drain()`` hands over every pod changed since the last call: pod key
      (``namespace/name``) -> the pod now, ``None`` when it is gone. One caller, the
      service's publisher; the next call starts empty.
    - ``status`` is a ``WatchStatus``: ``synced`` once the first complete set of pods is in
      (the service serves nothing before), ``disconnected_since`` the monotonic time since
      which the data may be out of date (``None``: current), ``fatal`` a message once the
      source has given up for good.
    - ``alive``: the source still delivers (false before ``start``, after ``stop`` or a fatal end).
    """

    def start(self, on_change: Callable[[], None]) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    def drain(self) -> Changes: ...

    @property
    def status(self) -> WatchStatus: ...

    @property
    def alive(self) -> bool: ...
