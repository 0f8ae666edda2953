"""The immutable ``HostTable`` snapshot, the pure full builder and the incremental one.

HTTP handlers only read the current table (one attribute read); the publisher swaps in a
new one. A table carries the pre-rendered ``/hosts`` body of every group, so serving a
group is a dictionary lookup. Everything that spans all groups (``hosts``, ``text``,
``skipped``, ``preparing``) is computed on first use and kept, so publishing a table never
walks every pod. ``waiting_pods`` (the pods not served yet, with their reasons, for
``/hosts.json``) is re-sorted only when that set changed: work in proportion to the pods
waiting, not to all pods.

Two builders give the same table (a property test holds them to it):

- ``make_table(generation, pods, rules, admission)``: pure, the whole pod list at once; the
  reference.
- ``TableBuilder``: a deterministic state machine (no I/O, no clock, no tasks): ``apply``
  takes the pods that changed since the last call (``None`` for a deleted pod) and the
  admission state as a value; ``table`` makes the snapshot. Work per call is proportional to
  the pods that changed and the size of the groups they touch, not to the pod count (the
  one exception is a daemon without ``--group-by``: its one group is all the hosts).

Admission state is a mapping ``uid -> ADMITTED | PREPARING | "prepare failed: ..."``; a host
whose uid is missing is *preparing* (the caller starts its preparation: ``Delta.unprepared``).
``admission=None`` means no ``--prepare-cmd``: every host is served.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from discovery.hosts import Host, Rules, Skipped, Verdict, Waiting, classify, collect

# Admission states a host can be in (see ``discovery.admission``).
ADMITTED = "admitted"
PREPARING = "preparing"

Group = str | None
SortKey = tuple[str, str, str]   # (created, namespace, pod): the served order
AdmissionState = Mapping[str, str] | None
_EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})


def sort_key(h: Host) -> SortKey:
    return (h.created, h.namespace, h.pod)


def _skip_key(s: Skipped | Waiting) -> tuple[str, str]:
    return (s.namespace, s.pod)


@dataclass(frozen=True)
class GroupView:
    """One group's answer: served hosts in order, their ``/hosts`` body, hosts being
    prepared, and hosts whose preparation failed (as ``Skipped``)."""

    hosts: tuple[Host, ...] = ()
    body: bytes = b""
    preparing: tuple[Host, ...] = ()
    failed: tuple[Skipped, ...] = ()


def group_view(candidates: Iterable[Host], admission: AdmissionState) -> GroupView:
    """Pure: a group's hosts (deduplicated, in served order) + admission state -> ``GroupView``."""
    served: list[Host] = []
    preparing: list[Host] = []
    failed: list[Skipped] = []
    for h in candidates:
        state = ADMITTED if admission is None else admission.get(h.uid, PREPARING)
        if state == ADMITTED:
            served.append(h)
        elif state == PREPARING:
            preparing.append(h)
        else:
            failed.append(Skipped(h.namespace, h.pod, h.uid, state))
    return GroupView(tuple(served), "".join(f"{h.host}:{h.slots}\n" for h in served).encode(),
                     tuple(preparing), tuple(failed))


@dataclass(frozen=True)
class HostTable:
    """One consistent answer. ``synced`` is False until the first LIST has been applied.

    ``groups`` maps each group (``None`` without ``--group-by``) to its ``GroupView``;
    ``base_skipped`` are pods skipped by the host rule (bad settings, duplicates), sorted;
    ``waiting_pods`` the pods behind the ``waiting`` counts, sorted. The other attributes are
    derived on first use.
    """

    generation: int
    synced: bool
    groups: Mapping[Group, GroupView] = field(default_factory=lambda: _EMPTY_MAP)
    base_skipped: tuple[Skipped, ...] = ()
    waiting: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)
    pods_seen: int = 0
    served: int = 0   # number of hosts served, over all groups
    waiting_pods: tuple[Waiting, ...] = ()  # the pods counted in ``waiting``, by namespace/pod

    def body(self, group: Group) -> bytes:
        """The ``/hosts`` body for ``group`` (None: every host); empty for an unknown group."""
        if group is None:
            return self.text
        view = self.groups.get(group)
        return view.body if view is not None else b""

    def hosts_in(self, group: Group) -> tuple[Host, ...]:
        if group is None:
            return self.hosts
        view = self.groups.get(group)
        return view.hosts if view is not None else ()

    @cached_property
    def hosts(self) -> tuple[Host, ...]:
        """Every served host in the stable order (a merge of the groups)."""
        views = list(self.groups.values())
        if len(views) == 1:
            return views[0].hosts
        return tuple(heapq.merge(*(v.hosts for v in views), key=sort_key))

    @cached_property
    def text(self) -> bytes:
        """``/hosts`` for every host."""
        if len(self.groups) == 1:
            return next(iter(self.groups.values())).body
        return "".join(f"{h.host}:{h.slots}\n" for h in self.hosts).encode()

    @cached_property
    def preparing(self) -> tuple[Host, ...]:
        return tuple(heapq.merge(*(v.preparing for v in self.groups.values()), key=sort_key))

    @cached_property
    def skipped(self) -> tuple[Skipped, ...]:
        """Every skipped pod (host rule, duplicates, failed preparation), by namespace/pod."""
        failed = [s for v in self.groups.values() for s in v.failed]
        if not failed:
            return self.base_skipped
        return tuple(sorted([*self.base_skipped, *failed], key=_skip_key))


EMPTY = HostTable(generation=0, synced=False)


def make_table(generation: int, pods: Iterable[Mapping[str, Any]], rules: Rules,
               admission: AdmissionState = None) -> HostTable:
    """Pure: every pod at once -> ``HostTable`` (the reference the incremental builder meets)."""
    pods = list(pods)
    result = collect(classify(p, rules) for p in pods)
    grouped: dict[Group, list[Host]] = {}
    for h in result.hosts:
        grouped.setdefault(h.group, []).append(h)
    groups = {g: group_view(hs, admission) for g, hs in grouped.items()}
    return HostTable(generation=generation, synced=True, groups=MappingProxyType(groups),
                     base_skipped=result.skipped, waiting=MappingProxyType(dict(result.waiting)),
                     pods_seen=len(pods), served=sum(len(v.hosts) for v in groups.values()),
                     waiting_pods=result.waiting_pods)


@dataclass(frozen=True)
class Delta:
    """What one ``TableBuilder.apply`` changed, for the caller's effects.

    ``unprepared``: served-order hosts with no admission state (start their preparation);
    ``gone_uids``: uids no pod holds any more (forget their admission); ``new_skips``: skips
    that were not there before (log them); ``hosts_changed``: some group's hosts changed;
    ``groups``: the group label values the changed pods carry (served, skipped or waiting),
    for the daemon's record of every group it has seen.
    """

    unprepared: tuple[Host, ...] = ()
    gone_uids: frozenset[str] = frozenset()
    new_skips: tuple[Skipped, ...] = ()
    hosts_changed: bool = False
    groups: frozenset[str] = frozenset()


class _GroupState:
    """A group's host candidates: sort keys kept sorted, and per key the hosts claiming it."""

    __slots__ = ("order", "hosts", "view")

    def __init__(self) -> None:
        self.order: list[SortKey] = []        # sorted sort keys of the group's winners
        self.hosts: dict[SortKey, Host] = {}  # winner by sort key
        self.view = GroupView()


class TableBuilder:
    """Incremental ``HostTable`` maker; see the module docstring. One owner, not thread-safe."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self._verdicts: dict[str, Verdict] = {}          # pod key -> verdict
        self._waiting: dict[str, int] = {}
        self._waiting_pods: dict[str, Waiting] = {}      # pod key -> its waiting verdict
        self._waiting_view: tuple[Waiting, ...] = ()
        self._waiting_dirty = False
        self._skipped: dict[str, Skipped] = {}           # pod key -> rule skip or duplicate
        self._claims: dict[tuple[Group, str], list[Host]] = {}  # (group, host) -> claimants, ordered
        self._groups: dict[Group, _GroupState] = {}
        self._uid_count: dict[str, int] = {}
        self._uid_groups: dict[str, dict[SortKey, Group]] = {}  # uid -> its winners' groups
        self._new_skips: list[Skipped] = []       # skips that appeared during this apply
        self._was_skipped: dict[str, Skipped] = {}  # skips removed during this apply
        self._dirty: set[Group] = set()
        self._skipped_view: tuple[Skipped, ...] = ()
        self._skipped_dirty = False
        self._served = 0

    # -- events ------------------------------------------------------------------------------
    def apply(self, changes: Mapping[str, Mapping[str, Any] | None], admission: AdmissionState = None,
              admission_changed: Iterable[str] = ()) -> Delta:
        """Take the pods that changed (key -> pod, ``None``: deleted) and the uids whose admission
        state changed; never raises on odd pods. Returns the ``Delta`` to act on."""
        gone: set[str] = set()
        groups: set[str] = set()
        self._new_skips = []
        self._was_skipped = {}
        for key, pod in changes.items():
            old = self._verdicts.pop(key, None)
            if old is not None:
                self._remove(key, old)
                n = self._uid_count[old.uid] - 1
                if n:
                    self._uid_count[old.uid] = n
                else:
                    del self._uid_count[old.uid]
                    gone.add(old.uid)
            if pod is None:
                continue
            v = classify(pod, self.rules)
            if v.group is not None:
                groups.add(v.group)
            self._verdicts[key] = v
            self._add(key, v)
            self._uid_count[v.uid] = self._uid_count.get(v.uid, 0) + 1
        for uid in admission_changed:
            self._dirty.update(self._uid_groups.get(uid, {}).values())
        new_skips = self._new_skips
        unprepared: list[Host] = []
        hosts_changed = False
        for g in self._dirty:
            st = self._groups.get(g)
            if st is None:
                continue
            winners = [st.hosts[k] for k in st.order]
            before = st.view
            st.view = group_view(winners, admission)
            if admission is not None:
                unprepared += [h for h in winners if h.uid not in admission]
            if st.view.body != before.body:
                hosts_changed = True
                self._served += len(st.view.hosts) - len(before.hosts)
            if st.view.failed != before.failed:
                old_failed = set(before.failed)
                new_skips += [s for s in st.view.failed if s not in old_failed]
            if not st.order:
                del self._groups[g]
        self._dirty.clear()
        unprepared.sort(key=sort_key)
        return Delta(tuple(unprepared), frozenset(u for u in gone if u not in self._uid_count),
                     tuple(new_skips), hosts_changed, frozenset(groups))

    def table(self, generation: int) -> HostTable:
        """The current snapshot (``synced``). Copies the group map, nothing per pod."""
        if self._skipped_dirty:
            self._skipped_view = tuple(sorted(self._skipped.values(), key=_skip_key))
            self._skipped_dirty = False
        if self._waiting_dirty:
            self._waiting_view = tuple(sorted(self._waiting_pods.values(), key=_skip_key))
            self._waiting_dirty = False
        return HostTable(generation=generation, synced=True,
                         groups=MappingProxyType({g: st.view for g, st in self._groups.items()}),
                         base_skipped=self._skipped_view, waiting=MappingProxyType(dict(self._waiting)),
                         pods_seen=len(self._verdicts), served=self._served, waiting_pods=self._waiting_view)

    # -- bookkeeping -------------------------------------------------------------------------
    def _add(self, key: str, v: Verdict) -> None:
        if isinstance(v, Waiting):
            self._waiting[v.reason] = self._waiting.get(v.reason, 0) + 1
            self._waiting_pods[key] = v
            self._waiting_dirty = True
        elif isinstance(v, Skipped):
            self._skip(key, v)
        else:
            claim = (v.group, v.host)
            claimants = self._claims.setdefault(claim, [])
            if claimants:
                self._unwin(claimants[0])
            insort(claimants, v, key=sort_key)
            self._win(claimants[0])
            for loser in claimants[1:]:
                self._mark_duplicate(loser)

    def _remove(self, key: str, v: Verdict) -> None:
        if isinstance(v, Waiting):
            n = self._waiting[v.reason] - 1
            if n:
                self._waiting[v.reason] = n
            else:
                del self._waiting[v.reason]
            del self._waiting_pods[key]
            self._waiting_dirty = True
        elif isinstance(v, Skipped):
            self._was_skipped[key] = self._skipped.pop(key)
            self._skipped_dirty = True
        else:
            claim = (v.group, v.host)
            claimants = self._claims[claim]
            first = claimants[0]
            claimants.remove(v)
            if first is v:
                self._unwin(v)
                if claimants:
                    self._win(claimants[0])
                    self._unmark_duplicate(claimants[0])
            else:
                self._unmark_duplicate(v)
            if not claimants:
                del self._claims[claim]

    def _win(self, h: Host) -> None:
        st = self._groups.get(h.group)
        if st is None:
            st = self._groups[h.group] = _GroupState()
        k = sort_key(h)
        insort(st.order, k)
        st.hosts[k] = h
        self._uid_groups.setdefault(h.uid, {})[k] = h.group
        self._dirty.add(h.group)

    def _unwin(self, h: Host) -> None:
        st = self._groups[h.group]
        k = sort_key(h)
        del st.order[bisect_left(st.order, k)]
        del st.hosts[k]
        groups = self._uid_groups[h.uid]
        del groups[k]
        if not groups:
            del self._uid_groups[h.uid]
        self._dirty.add(h.group)

    def _mark_duplicate(self, h: Host) -> None:
        self._skip(f"{h.namespace}/{h.pod}", Skipped(h.namespace, h.pod, h.uid, f"duplicate host {h.host!r}", h.group))

    def _skip(self, key: str, s: Skipped) -> None:
        if self._skipped.get(key) != s:
            self._skipped[key] = s
            self._skipped_dirty = True
            if self._was_skipped.get(key) != s:
                self._new_skips.append(s)

    def _unmark_duplicate(self, h: Host) -> None:
        key = f"{h.namespace}/{h.pod}"
        s = self._skipped.get(key)
        if s is not None and s.uid == h.uid and s.reason.startswith("duplicate host"):
            self._was_skipped[key] = self._skipped.pop(key)
            self._skipped_dirty = True
