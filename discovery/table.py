"""The immutable ``HostTable`` snapshot and the builder that makes one from the pod cache.

HTTP handlers only read the current table (one attribute read); the publisher swaps in a
new one. A table carries the pre-rendered ``/hosts`` bodies (all hosts and per group), so
serving is a dictionary lookup.

The builder remembers each pod's verdict by ``(uid, resourceVersion)``, so a rebuild after
one event re-classifies one pod, not ten thousand.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from discovery.hosts import Host, HostResult, Rules, Skipped, Verdict, Waiting, classify, collect, render_lines

# Admission states a host can be in (see ``discovery.admission``).
ADMITTED = "admitted"
PREPARING = "preparing"


@dataclass(frozen=True)
class HostTable:
    """One consistent answer. ``synced`` is False until the first LIST has been applied."""

    generation: int
    synced: bool
    hosts: tuple[Host, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    waiting: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    preparing: tuple[Host, ...] = ()
    waiting_pods: tuple[Waiting, ...] = ()
    pods_seen: int = 0
    text: bytes = b""
    groups: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))

    def body(self, group: str | None) -> bytes:
        """The ``/hosts`` body for ``group`` (None: every host); empty for an unknown group."""
        if group is None:
            return self.text
        return self.groups.get(group, b"")

    def hosts_in(self, group: str | None) -> tuple[Host, ...]:
        if group is None:
            return self.hosts
        return tuple(h for h in self.hosts if h.group == group)


EMPTY = HostTable(generation=0, synced=False)

# uid -> ADMITTED | PREPARING | "failed: <reason>"
AdmissionView = Callable[[Host], str]


def make_table(generation: int, result: HostResult, pods_seen: int,
               admission: AdmissionView | None = None) -> HostTable:
    """Pure: a ``HostResult`` (+ the admission state of each host) -> ``HostTable``.

    Hosts not yet admitted are listed as ``preparing``; hosts whose preparation failed
    become ``skipped`` with the failure as the reason.
    """
    hosts = result.hosts
    preparing: list[Host] = []
    skipped = list(result.skipped)
    if admission is not None:
        served: list[Host] = []
        for h in hosts:
            state = admission(h)
            if state == ADMITTED:
                served.append(h)
            elif state == PREPARING:
                preparing.append(h)
            else:
                skipped.append(Skipped(h.namespace, h.pod, h.uid, state))
        hosts = tuple(served)
        skipped.sort(key=lambda s: (s.namespace, s.pod))
    grouped: dict[str, list[Host]] = {}
    for h in hosts:
        if h.group is not None:
            grouped.setdefault(h.group, []).append(h)
    return HostTable(
        generation=generation, synced=True, hosts=hosts, skipped=tuple(skipped),
        waiting=MappingProxyType(dict(result.waiting)), preparing=tuple(preparing),
        waiting_pods=result.waiting_pods,
        pods_seen=pods_seen, text=render_lines(hosts).encode(),
        groups=MappingProxyType({g: render_lines(hs).encode() for g, hs in grouped.items()}))


class TableBuilder:
    """Pods -> ``HostResult`` with verdicts remembered by ``(uid, resourceVersion)``.

    Not thread-safe: one owner (the publisher) calls ``result``.
    """

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self._memo: dict[tuple[str, str], Verdict] = {}

    def result(self, pods: Iterable[Mapping[str, Any]]) -> HostResult:
        memo: dict[tuple[str, str], Verdict] = {}
        old = self._memo
        verdicts = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            rv = meta.get("resourceVersion")
            if rv:
                key = (str(meta.get("uid")), str(rv))
                v = old.get(key)
                if v is None:
                    v = classify(pod, self.rules)
                memo[key] = v
            else:
                v = classify(pod, self.rules)
            verdicts.append(v)
        self._memo = memo
        return collect(verdicts)
