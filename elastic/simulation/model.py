"""The simulated world: pods and their training processes, the network between them and the
driver, the driver process (its stalls, its ping senders, its accept queue), the lease
wrapper on each pod, and the worlds: a member's loss or a joiner begins a reset, every member
checks in at the registration barrier, the barrier's deadline judges the missing, and the
next world forms. The decisions are the real cores' (``liveness``, ``cooldowns``,
``barrier``, ``joins``); everything here only observes and executes, as the driver's threads do. The
``Record`` it leaves is what the invariants check.
"""
from __future__ import annotations

import functools
import math
import random
from collections import deque
from dataclasses import dataclass, field, replace

from elastic.driver import barrier
from elastic.driver.cooldowns import Cooldowns
from elastic.driver.joins import Drop, Release, Spawn, Tell, admitted
from elastic.driver.joins import Settings as JoinSettings
from elastic.driver.liveness import Lose, Ping, Rebaseline, Settings
from elastic.simulation.clock import Clock
from elastic.simulation.faults import FOREVER, Fault, Topology
from elastic.simulation.rules import Rules

RTT = (0.0005, 0.01)  # a healthy answer's round trip, seconds
START = (1.0, 5.0)  # a joiner's start-up until it waits at the rendezvous
JOIN_DEADLINE = 15.0
SIBLING_WAIT = 5.0  # a waiting joiner is held back this long for siblings still starting
REPORT_EVERY = 2.0  # a training process's progress report, when the run has them
LEASE = 8.0  # the lease wrapper ends its worker after this long without a renewal
SYN_RETRIES = (1.0, 3.0, 7.0)  # a dropped handshake is tried again this long after the first
EXIT_SEEN = 0.05  # a process exit reaches the driver (its ssh session ends)
FILL_EVERY = 1.0  # the driver's discovery loop: releases, joiners for empty slots
CHECK_IN = (0.05, 0.5)  # a healthy member's abort, restore and check-in after a reset begins
BARRIER_DEADLINE = 15.0
PROGRESS_ANSWER = 4.0  # the progress request: 2 tries of 2 s


@dataclass
class Proc:
    """One training process (an incarnation on a slot)."""
    key: str  # host/slot#incarnation
    host: str
    slot: int
    started: float
    ready: float | None = None  # in the world since (a joiner: waiting at the rendezvous since)
    joining: bool = False  # a joiner waiting to be taken in: no member of the reset it asked for
    gone: float | None = None  # exited, lost or dropped
    cause: str | None = None  # why gone
    known: float | None = None  # when the driver knew it was gone (lost it, or saw its exit)
    freezes: list[tuple[float, float]] = field(default_factory=list)  # its own (and drops)
    hangs: list[tuple[float, float]] = field(default_factory=list)  # it hangs at a reset within these
    writes: list[tuple[float, float]] = field(default_factory=list)  # background writes
    stuck: list[tuple[float, float]] = field(default_factory=list)  # hung at a reset: no progress
    waiting: list[tuple[float, float]] = field(default_factory=list)  # its main thread waits for a write
    taken: float | None = None  # a joiner: taken into a world at
    # a joiner waiting that the next world would not take (a slot below it has no worker)
    blocked: list[tuple[float, float]] = field(default_factory=list)
    blocked_since: float | None = None


@dataclass
class Host:
    name: str
    slots: int
    freezes: list[tuple[float, float]] = field(default_factory=list)
    slow: list[tuple[float, float, float]] = field(default_factory=list)  # (from, to, latency)
    bad_start: list[tuple[float, float, frozenset[int] | None]] = field(default_factory=list)  # None: every slot
    hang_start: list[tuple[float, float]] = field(default_factory=list)


def _bad_slots(f: Fault, slots: int) -> frozenset[int] | None:
    """The slots a bad start fails: every one, or on a pod of several, half the time one (a
    broken GPU), drawn from the fault's own time so no other draw of the run moves."""
    pick = random.Random(repr((f.at, f.targets)))
    if slots < 2 or pick.random() < 0.5:
        return None
    return frozenset({pick.randrange(slots)})


def _covers(spans, t: float) -> bool:
    return any(a <= t < b for a, b, *_ in spans)


@dataclass
class Reset:
    """One reset: the members it waits for, when it began and ended (the next world formed)."""
    rid: int
    began: float
    expected: set[str]
    checked: set[str] = field(default_factory=set)  # recorded READY
    failed: set[str] = field(default_factory=set)  # recorded FAILURE: lost or exited
    ended: float | None = None
    armed: bool = False
    began_by_failure: bool = False  # a member's loss began it (its FAILURE is the first record)
    joiners: set[str] = field(default_factory=set)  # waiting joiners it takes in, outside its barrier
    busy_until: float = 0.0  # the last background write a member waits for


@dataclass
class Record:
    """What happened, for the invariants."""
    procs: list[Proc] = field(default_factory=list)
    hosts: dict[str, Host] = field(default_factory=dict)
    stalls: list[tuple[float, float]] = field(default_factory=list)
    losses: list[tuple[float, str, str]] = field(default_factory=list)  # (when, proc key, cause)
    rebaselines: list[tuple[float, str]] = field(default_factory=list)
    refused_for_ever: set[str] = field(default_factory=set)
    work: int = 0  # pings sent, reports and new connections the driver handled
    end: float = 0.0
    settings: Settings = field(default_factory=Settings)
    resets: list[Reset] = field(default_factory=list)
    worlds: list[tuple[int, float, frozenset[str]]] = field(default_factory=list)  # (reset, when, members)
    check_ins: list[tuple[int, str, float]] = field(default_factory=list)  # (reset, proc key, when)


class World:
    def __init__(self, rng: random.Random, topo: Topology, faults: list[Fault], rules: Rules,
                 end: float, reports: bool, settings: Settings | None = None,
                 cooldowns: Cooldowns | None = None):
        self.rng, self.rules, self.reports = rng, rules, reports
        self.clock = Clock()
        self.settings = replace(settings or Settings(), pings_to_lose=rules.pings_to_lose)
        self.liveness = rules.liveness(settings=self.settings)
        self.cooldowns = cooldowns or Cooldowns(base=2.0, longest=16.0)
        self.joins = rules.joins(JoinSettings(deadline=JOIN_DEADLINE, sibling_wait=SIBLING_WAIT,
                                              refusal=self.cooldowns.base, longest=self.cooldowns.longest))
        self.joins_due, self.joins_gen = math.inf, 0
        self.rec = Record(hosts={h: Host(h, n) for h, n in topo.hosts}, end=end, settings=self.settings)
        self.procs: dict[str, Proc] = {}
        self.incarnation: dict[tuple[str, int], int] = {}
        self.world: set[str] = set()
        self.lanes: dict[str, deque[str]] = {"main": deque(), "suspect": deque()}
        self.busy = {"main": 0, "suspect": 0}
        self.tick_due, self.tick_gen = math.inf, 0
        self.reset: Reset | None = None  # the open reset
        self.pending: set[str] = set()  # joiners that joined while a reset was open
        self.rec.stalls = merge_spans([(f.at, f.at + f.duration) for f in faults if f.kind == "driver-stall"])
        for h, n in topo.hosts:
            for s in range(n):
                p = self._new_proc(h, s, 0.0)
                p.ready = 0.0
                self.world.add(p.key)
                self._report_loop(p, rng.uniform(0, REPORT_EVERY))
        for f in faults:
            self.clock.at(f.at, functools.partial(self._fault, f))
        for a, b in self.rec.stalls:
            self.clock.at(a, functools.partial(self._lease_through_stall, a, b))
        self.liveness.watch(self.world, 0.0)
        self._schedule_tick(0.0)
        self.clock.at(FILL_EVERY, self._fill)

    # -- ground truth ------------------------------------------------------------------------
    def free_at(self, t: float) -> float:
        """When the driver process can act on something due at t (after any stall)."""
        for a, b in self.rec.stalls:
            if a <= t < b:
                t = b
        return t

    def answering_from(self, p: Proc, t: float) -> float:
        """The first time >= t at which p answers (inf: never)."""
        host = self.rec.hosts[p.host]
        spans = sorted(p.freezes + host.freezes)
        moved = True
        while moved:
            if p.gone is not None and t >= p.gone:
                return math.inf
            moved = False
            for a, b in spans:
                if a <= t < b:
                    t, moved = b, True
        return t

    def latency(self, p: Proc, t: float) -> float:
        slow = [lat for a, b, lat in self.rec.hosts[p.host].slow if a <= t < b]
        return max(slow) if slow else self.rng.uniform(*RTT)

    # -- the driver's actions -------------------------------------------------------------------
    def driver(self, t: float, action) -> None:
        self.clock.at(self.free_at(t), action)

    def _schedule_tick(self, intended: float) -> None:
        if intended >= self.tick_due:
            return
        self.tick_gen += 1
        self.tick_due = intended
        gen = self.tick_gen
        self.clock.at(self.free_at(intended), lambda: self._tick(gen, intended))

    def _tick(self, gen: int, intended: float) -> None:
        if gen != self.tick_gen:
            return
        now = self.clock.now
        self.tick_due = math.inf
        decisions, due = self.liveness.tick(now, late=now - intended)
        for d in decisions:
            if isinstance(d, Ping):
                for key in d.keys:
                    lane = "suspect" if self.liveness.suspected(key) else "main"
                    self.lanes[lane].append(str(key))
                self._pump("main")
                self._pump("suspect")
            elif isinstance(d, Lose):
                self._lose(d.keys, now)
            elif isinstance(d, Rebaseline):
                self.rec.rebaselines.append((now, d.reason))
        self._schedule_tick(due)

    def _pump(self, lane: str) -> None:
        cap = self.rules.main_threads if lane == "main" else self.rules.suspect_threads
        queue = self.lanes[lane]
        while queue and (cap is None or self.busy[lane] < cap):
            key = queue.popleft()
            if key not in self.liveness.watched:
                self.liveness.dropped(key)
                continue
            self.busy[lane] += 1
            self.rec.work += 1
            self._send(lane, self.procs[key], self.clock.now)

    def _send(self, lane: str, p: Proc, sent: float) -> None:
        timeout = self.settings.ping_timeout
        lat = self.latency(p, sent)
        back = self.answering_from(p, sent + lat / 2) + lat / 2
        if back <= sent + timeout:
            def done():
                self.busy[lane] -= 1
                self.liveness.answered(p.key, sent)
                self._pump(lane)
        else:
            back = sent + timeout

            def done():
                self.busy[lane] -= 1
                self.liveness.failed(p.key, sent)
                self._pump(lane)
                self._schedule_tick(self.clock.now)
        self.driver(back, done)

    def _lose(self, keys, now: float) -> None:
        for key in keys:
            p = self.procs[key]
            self._gone(p, now, "liveness")
            self.rec.losses.append((now, key, "liveness"))
        for host in sorted({self.procs[k].host for k in keys}):
            self.cooldowns.keep_out(host, "a worker there went silent", now)
        self.liveness.watch(self.world, now)
        self._members_left(keys)

    def _gone(self, p: Proc, t: float, cause: str) -> None:
        if p.gone is None:
            p.gone, p.cause = t, cause
        if cause in ("liveness", "barrier") and p.known is None:
            p.known = t
        self.world.discard(p.key)
        if p.taken is None and p.started > 0.0 and (p.host, p.slot) in self.joins.joiners:
            # a joiner ended before it was taken in: the core drops it and refuses its host
            self._execute(self.joins.ended((p.host, p.slot), cause, self.clock.now, self._listed()))

    def _listed(self) -> dict[str, int]:
        """The hosts the driver lists: a quarantined host is out of its host manager."""
        return {h.name: h.slots for h in self.rec.hosts.values() if not self.cooldowns.is_out(h.name)}

    def _members(self) -> set[tuple[str, int]]:
        """The slots that have a member of the world."""
        return {(p.host, p.slot) for p in self.procs.values() if p.gone is None and p.ready is not None
                and not p.joining}

    def _fill(self) -> None:
        """The discovery loop: hosts whose cooldown is over serve again; the joins' core starts
        joiners on free slots, drops and releases."""
        now = self.clock.now
        # a worker the driver gives up ends at once here (its ssh session is ended): no host
        # waits for a lost worker's exit
        self.cooldowns.due(now, listed=self.rec.hosts, running=())
        self._joins_tick()
        listed, members = self._listed(), self._members()
        occupied = {(p.host, p.slot) for p in self.procs.values() if p.gone is None}
        discovered = set(listed) - self.rec.refused_for_ever
        for spawn in self.joins.spawn(listed, members, discovered, occupied, max_np=10 ** 9, now=now):
            self._start_joiner(self.rec.hosts[spawn.key[0]], spawn.key[1], now)
        self._joins_wake()
        self._track_blocked(now, members)
        if now + FILL_EVERY <= self.rec.end:
            self.driver(now + FILL_EVERY, self._fill)

    def _joins_wake(self) -> None:
        """Run the joins' core at its next deadline (a join deadline, a sibling wait, a refusal)."""
        due = self.joins.due()
        if due >= self.joins_due or due > self.rec.end:
            return
        self.joins_gen += 1
        self.joins_due = due
        gen = self.joins_gen

        def tick():
            if gen == self.joins_gen:
                self.joins_due = math.inf
                self._joins_tick()
        self.driver(due, tick)

    def _joins_tick(self) -> None:
        self._execute(self.joins.tick(self.clock.now, self._listed(), self._members()))

    def _execute(self, decisions) -> None:
        """Carry out the joins' core's decisions, as the driver does."""
        now = self.clock.now
        for d in decisions:
            if isinstance(d, Drop):
                p = self._current(*d.key)
                if p is not None:
                    self._gone(p, now, f"joiner dropped: {d.reason}")
                    self.liveness.watch(self.world, now)
                    self.pending.discard(p.key)
            elif isinstance(d, Tell):
                for key in d.keys:
                    p = self._current(*key)
                    if p is None or not p.joining or p.key in self.world:
                        continue
                    self.world.add(p.key)
                    self.liveness.watch(self.world, now)
                    self._report_loop(p, now + REPORT_EVERY)
                    if self.reset is not None:
                        self.pending.add(p.key)
                    else:
                        self._begin_reset()
            elif isinstance(d, (Spawn, Release)):
                pass  # a spawn is _fill's; a released host gets joiners at the next round
        self._joins_wake()

    def _track_blocked(self, now: float, members: set[tuple[str, int]]) -> None:
        """Ground truth for the invariants: a waiting joiner the next world would not take."""
        waiting = [(p.host, p.slot) for p in self.procs.values() if p.gone is None and p.joining]
        for p in self.procs.values():
            blocked = p.gone is None and p.joining and \
                admitted(p.host, self.rec.hosts[p.host].slots, members, waiting) <= p.slot
            if blocked and p.blocked_since is None:
                p.blocked_since = now
            elif not blocked and p.blocked_since is not None:
                p.blocked.append((p.blocked_since, now))
                p.blocked_since = None

    def _start_joiner(self, host: Host, slot: int, now: float) -> None:
        p = self._new_proc(host.name, slot, now)
        if any(a <= now < b and (slots is None or slot in slots) for a, b, slots in host.bad_start):
            self.clock.at(now + self.rng.uniform(0.5, 3.0), lambda: self._joiner_failed(p, "failed at start"))
            return
        ready = now + self.rng.uniform(*START)
        if _covers(host.hang_start, now):
            ready = math.inf
        ready = self.answering_from(p, ready)
        if ready <= now + JOIN_DEADLINE:
            self.driver(ready, lambda: self._joined(p))
        # else the core drops it at its deadline

    def _joined(self, p: Proc) -> None:
        if p.gone is not None or (p.host, p.slot) not in self.joins.joiners:
            return
        p.ready = self.clock.now
        p.joining = True
        self._execute(self.joins.ready((p.host, p.slot), self.clock.now))

    def _joiner_failed(self, p: Proc, why: str) -> None:
        if p.gone is not None:
            return
        if self.rules.refuse_forever:
            self.rec.refused_for_ever.add(p.host)
        self._gone(p, self.clock.now, f"joiner {why}")

    def _new_proc(self, host: str, slot: int, now: float) -> Proc:
        n = self.incarnation.get((host, slot), 0) + 1
        self.incarnation[(host, slot)] = n
        p = Proc(f"{host}/{slot}#{n}", host, slot, started=now)
        self.procs[p.key] = p
        self.rec.procs.append(p)
        return p

    def _report_loop(self, p: Proc, at: float) -> None:
        if not self.reports:
            return

        def report():
            if p.gone is not None or self.clock.now > self.rec.end:
                return
            if self.answering_from(p, self.clock.now) == self.clock.now:
                self.rec.work += 1
                self.driver(self.clock.now, lambda: self.liveness.heard(p.key, self.clock.now))
            self.clock.at(self.clock.now + REPORT_EVERY, report)
        self.clock.at(at, report)

    # -- faults -------------------------------------------------------------------------------
    def _fault(self, f: Fault) -> None:
        now, end = f.at, f.at + f.duration
        if f.kind in ("freeze-worker", "short-freeze", "freeze-majority", "lost-answers", "kill"):
            for target in f.targets:
                name, slot = target.split("/")
                p = self._current(name, int(slot))
                if p is None:
                    continue
                if f.kind == "kill":
                    p.gone, p.cause = now, "killed"
                    self.driver(now + EXIT_SEEN, lambda p=p: self._exited(p))
                else:
                    p.freezes.append((now, end))
        elif f.kind in ("hang-at-reset", "busy-write"):
            name, slot = f.targets[0].split("/")
            p = self._current(name, int(slot))
            if p is not None:
                (p.hangs if f.kind == "hang-at-reset" else p.writes).append((now, end))
        elif f.kind == "hang-pod-at-reset":
            for s in range(self.rec.hosts[f.targets[0]].slots):
                p = self._current(f.targets[0], s)
                if p is not None:
                    p.hangs.append((now, end))
        elif f.kind in ("freeze-host", "freeze-two-hosts", "slow-answers", "bad-start", "hang-start"):
            host = self.rec.hosts[f.targets[0]]
            if f.kind in ("freeze-host", "freeze-two-hosts"):
                host.freezes.append((now, end))
            elif f.kind == "slow-answers":
                host.slow.append((now, end, self.rng.uniform(0.3, 0.8) * self.settings.ping_timeout))
            elif f.kind == "bad-start":
                host.bad_start.append((now, end, _bad_slots(f, host.slots)))
            else:
                host.hang_start.append((now, end))

    def _current(self, host: str, slot: int) -> Proc | None:
        n = self.incarnation.get((host, slot))
        p = self.procs.get(f"{host}/{slot}#{n}")
        return p if p is not None and p.gone is None else None

    def _exited(self, p: Proc) -> None:
        if p.known is None:
            p.known = self.clock.now
        if p.taken is None and p.started > 0.0 and self._current(p.host, p.slot) is None and \
                self.incarnation.get((p.host, p.slot)) == int(p.key.rsplit("#", 1)[1]) and \
                (p.host, p.slot) in self.joins.joiners:
            # a joiner killed before it was taken in: the core drops it and refuses its host
            self._execute(self.joins.ended((p.host, p.slot), p.cause or "exited", self.clock.now, self._listed()))
        self.world.discard(p.key)
        self.liveness.watch(self.world, self.clock.now)
        if p.ready is not None:
            self._members_left([p.key])

    def _lease_through_stall(self, a: float, b: float) -> None:
        """Each running wrapper renews its lease every second; through the stall [a, b) its
        renewals wait: on its kept connection (keep-alive) or in the accept queue, or are
        dropped when the backlog is full and retried as TCP does. A wrapper whose lease runs
        out ends its worker."""
        attempts = []
        for p in self.procs.values():
            if p.gone is None and p.ready is not None and not _covers(self.rec.hosts[p.host].freezes, a):
                last = a - self.rng.uniform(0.0, 1.0)
                attempts.append((last + 1.0, last, p))
        attempts.sort(key=lambda x: x[0])
        queued = 0
        for first, last, p in attempts:
            if first >= b:
                continue
            if not self.rules.keep_alive:
                self.rec.work += 1
            if self.rules.keep_alive or queued < self.rules.backlog:
                queued += 0 if self.rules.keep_alive else 1
                renewed = b
            else:
                retries = [first + r for r in SYN_RETRIES if first + r >= b]
                renewed = retries[0] if retries else b + 1.0
            if renewed - last > LEASE:
                def killed(p=p, at=last + LEASE):
                    if p.gone is None:
                        self._gone(p, at, "lease")
                        self.rec.losses.append((at, p.key, "lease"))
                        self.driver(at + EXIT_SEEN, lambda: self._exited(p))
                self.clock.at(last + LEASE, killed)

    # -- worlds: resets, check-ins, the barrier's deadline -------------------------------------
    # As Horovod's registration barrier: a reset waits for every member of the world it began
    # in; a member that checks in records READY, one lost or exited records its FAILURE (both
    # count for the barrier and for the deadline's arming); the next world is the READY ones.
    def _members_left(self, keys) -> None:
        """Members gone (lost, exited): their failure is recorded at the barrier of the open
        reset, or begins one (the others are aborted)."""
        self.pending -= set(keys)
        # a joiner waiting to be taken in is no member: its loss drops it, it begins no reset
        left = {k for k in keys if self.procs[k].ready is not None and not self.procs[k].joining}
        if not left:
            return
        r = self.reset
        if r is None:
            self._begin_reset(failed=left)
            return
        r.failed |= left & r.expected
        r.checked -= left  # a FAILURE overrides its READY (it died waiting at the barrier)
        self._barrier_moved(r)

    def _begin_reset(self, failed: set[str] | None = None) -> None:
        """A reset: the members of the world (and those just lost) are its barrier's parties;
        the joiners waiting at the rendezvous are taken into the world it forms without being
        parties, as the driver's registration has them (a joiner never enters the barrier of a
        world it is not in): so a reset a joiner asked for has not begun until a member checks in."""
        now = self.clock.now
        rid = len(self.rec.resets) + 1
        alive = {k for k in self.world if self.procs[k].gone is None}
        joiners = {k for k in alive if self.procs[k].joining}
        alive -= joiners
        r = Reset(rid, now, expected=alive | (failed or set()), failed=set(failed or ()),
                  began_by_failure=bool(failed), joiners=joiners)
        self.reset = r
        self.rec.resets.append(r)
        self.pending.clear()
        for key in sorted(alive):
            p = self.procs[key]
            t = now + self.rng.uniform(*CHECK_IN)
            hang = max((b for a, b in p.hangs if a <= now < b), default=None)
            if hang is not None:
                p.stuck.append((now, hang))
                t = max(t, hang)
            write = max((b for a, b in p.writes if a <= now < b), default=None)
            if write is not None:
                p.waiting.append((now, write))
                r.busy_until = max(r.busy_until, write)
                t = max(t, write)
            t = self.answering_from(p, t)
            if t < math.inf:
                self.driver(t, functools.partial(self._check_in, p, rid))
        self._barrier_moved(r)

    def _check_in(self, p: Proc, rid: int) -> None:
        r = self.reset
        if r is None or r.rid != rid or p.gone is not None or p.key not in r.expected or p.key in r.failed:
            return  # a check-in for a world that is gone, or from a worker given up
        r.checked.add(p.key)
        self.rec.check_ins.append((rid, p.key, self.clock.now))
        self._barrier_moved(r)

    def _barrier_moved(self, r: Reset) -> None:
        """A check-in or a failure was recorded: the world forms once everyone has one; else
        the deadline arms when the rule says so."""
        recorded = r.checked | r.failed
        now = self.clock.now
        if recorded >= r.expected:
            r.ended = now
            taken = self._admit(r)
            for key in taken:
                self.procs[key].joining = False
                self.procs[key].taken = now
            self.joins.taken((self.procs[k].host, self.procs[k].slot) for k in taken)
            self.rec.worlds.append((r.rid, now, frozenset(r.checked | taken)))
            self.reset = None
            if self.pending:
                self._begin_reset()
            return
        if not r.armed and self.rules.barrier_arms(len(recorded), len(r.expected)):
            r.armed = True
            baseline = self._samples(r)
            self.driver(now + BARRIER_DEADLINE, functools.partial(self._deadline, r.rid, baseline))

    def _admit(self, r: Reset) -> set[str]:
        """The joiners the new world takes: a prefix of each host's slots after its members."""
        members = {(self.procs[k].host, self.procs[k].slot) for k in r.checked}
        joiners = {(self.procs[k].host, self.procs[k].slot): k for k in r.joiners if self.procs[k].gone is None}
        out = set()
        for (host, slot), key in joiners.items():
            if slot < admitted(host, self.rec.hosts[host].slots, members, joiners):
                out.add(key)
        return out

    def _samples(self, r: Reset) -> dict[str, barrier.Sample | None]:
        now = self.clock.now
        return {key: self._sample(self.procs[key], now) for key in sorted(r.expected - r.checked - r.failed)}

    def _sample(self, p: Proc, t: float) -> barrier.Sample | None:
        """The progress request's answer: none from a process that cannot answer within its two
        tries; else its main thread's CPU time so far (the work declared for it included,
        unless the rules say otherwise)."""
        if p.gone is not None or self.answering_from(p, t) > t + PROGRESS_ANSWER:
            return None
        idle = p.freezes + self.rec.hosts[p.host].freezes + p.stuck
        if not self.rules.declared_work:
            idle = idle + p.waiting
        spans = [(max(a, p.started), min(b, t)) for a, b in idle if min(b, t) > max(a, p.started)]
        return barrier.Sample(t, (t - p.started) - sum(b - a for a, b in merge_spans(spans)), None)

    def _deadline(self, rid: int, baseline: dict[str, barrier.Sample | None]) -> None:
        r = self.reset
        if r is None or r.rid != rid:
            return
        verdict = barrier.judge(baseline, self._samples(r))
        now = self.clock.now
        lost = list(verdict.silent) + list(verdict.idle)
        for key in lost:
            self._gone(self.procs[key], now, "barrier")
            self.rec.losses.append((now, key, "barrier"))
        if lost:
            self.liveness.watch(self.world, now)
        if verdict.kept:
            self.driver(now + BARRIER_DEADLINE, functools.partial(self._deadline, rid, dict(verdict.kept)))
        if lost:
            r.failed |= set(lost)
            self._barrier_moved(r)

    def run(self) -> Record:
        self.clock.run_until(self.rec.end)
        return self.rec


def merge_spans(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of closed time spans, as sorted, disjoint spans."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


__all__ = ["World", "Record", "Reset", "Proc", "Host", "FOREVER"]
