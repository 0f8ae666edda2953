"""Horovod's (patched) ``ElasticDriver`` with the project's failure detector: the liveness
thread observes and executes, ``elastic.driver.liveness`` decides.

Runs inside horovodrun's process. ``install()`` makes horovodrun's elastic launcher build this
class instead of Horovod's (``elastic.driver.hvdrun`` calls it: the driver of every
``horovodrun`` of the venv and the image, and of every elastic-run job); Horovod's own launcher,
``horovodrun-horovod``, keeps the fork's own detector.

What changes against the fork's detector (the rules are the core's, see its docstring):

- A silent majority is lost while the others answer; only a total silence is forgiven, once.
- A worker is lost only after ``pings_to_lose`` sent pings failed: a ping that waits in a
  queue proves nothing.
- Pings have a sender each while under way (at most ``PING_SENDERS``): a frozen worker holds
  its sender for the ping deadline and nobody queues behind it.
- The rendezvous server answers the lease wrappers of its own run on kept connections
  (``lease_answers``); its listen backlog is the fork's 1,024, not 5 (0105).
- The process ends within ``STOP_EXIT_AFTER`` of the driver's stop, whatever still waits
  (only once ``install`` made it horovodrun's driver: an embedded driver never ends its process).
- A host refused after a failed joiner (it failed at start or missed its join deadline) is
  refused for a cooldown (``Refusals`` over the joins' core, ``elastic.driver.joins``), not
  until it leaves discovery: a pod that restarts under its name, or a multi-slot pod with one
  bad start, gets joiners again; each refusal in a row doubles the cooldown.
- A joiner that waits above a slot of its host that has no worker and gets none while the host
  is refused (its sibling there failed) is dropped (the joins' core's stranded rule, asked at
  each discovery round): it could be taken in only with that slot, and waited holding its
  memory while the refusal lasted (the fork's: for ever).

- A host quarantined (a worker there lost for silence) is kept out and let back by
  ``Cooldowns``, the refusals' rule too (the simulation's): the cooldown doubles in a row,
  and the count starts again after ``QUARANTINE_MAX_SECS`` without one.

- The registration barrier's deadline is ``elastic.driver.barrier``'s: it arms once anyone
  has checked in and anyone is missing (the fork's: exactly one missing, so a multi-slot pod
  whose ranks all hung held the next world for ever), and judges the missing by their
  progress; a joiner not yet in a world is its join deadline's, never the barrier's.

- A worker's exit and its check-in at the registration barrier feed the detector at once: the
  slot of an exited process is forgotten (a new process there inherits no silence), a
  check-in counts as a sign of life.

- Adopt mode (``adopt_window``, ``ELASTIC_ADOPT_WORLD``): the driver takes over the world
  running at its fixed rendezvous endpoint instead of starting one (``adopt``, ``adopter``,
  the rule ``adoption``): its first world is the one the workers answer, no process started;
  workers lost between two worlds (a peer lost while no launcher led) are taken over as
  processes and the first world is formed with them (``AdoptInReset``); their rank requests
  wait at the ``RankGate`` until that world's barrier is set up (``wait_to_join``,
  ``_start_worker_processes``).

Everything else (leaves, the rest of joins, aborts) is the fork's.

The fork's hooks (0111, ``docs/driver.md``) are what this class implements where it changes
the fork's rules: ``liveness_loop`` (the liveness thread), ``quarantine_host`` and
``release_quarantines`` (quarantine), ``barrier_deadline_arms`` (0108's: the barrier's arming
rule), ``worker_exited`` and ``worker_checked_in``, ``discovery_round`` (the joins' core's
stranded rule, executed by the fork's ``_drop_joiner`` until step 3 deletes the fork's joins);
``hosts_assigned`` keeps the fork's default until leaves move here. Still
overridden, each until its concern moves out of the fork whole (``docs/driver.md``, "The
order the rest moves in"): ``stop`` (public: the bound on the process after it), ``start``
(public: adopt mode first), ``_world_assignments`` (an adoption's first world),
``wait_to_join`` and ``_start_worker_processes`` (the rank gate of an adoption),
``_unrecorded`` and ``lose_unrecorded_workers`` (the barrier's clock, step 6: the fork's
filter is one statement a hook would rewrite), ``_send_ping``, ``_ping`` and ``_ping_now``
(the fork's leave path sends its pings through them; they go with leaves, step 4). The
private helpers of the loop (``_lose_silent``, ``_key``) are this class's own.

The fork's refusals are a dict (host -> why) read under its ``_wait_hosts_cond``: ``Refusals``
keeps that interface and reads the clock, so the pure rule stays in ``Cooldowns``.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from horovod.runner.elastic import driver as horovod_driver

from elastic.driver import barrier, lease_answers
from elastic.driver.adopter import Adopter
from elastic.driver.adoption import Adopt, AdoptInReset
from elastic.driver.cooldowns import Cooldowns
from elastic.driver.joins import Joins, View, stranded
from elastic.driver.joins import Settings as JoinSettings
from elastic.driver.leading import still_leads
from elastic.driver.liveness import Liveness, Lose, Ping, Rebaseline, Settings
from elastic.driver.rank_gate import CLOSED, REFUSING, RankGate
from shared.event_kinds import Kind

# horovodrun exits this long after its driver stopped, whatever its threads still wait on (a
# stop once left horovodrun, elastic-run and its daemon running for minutes); longer than
# hvdrun's reaps after the launcher's loss (1.5 x 20 s), which run after the stop
STOP_EXIT_AFTER = 45.0
PING_SENDERS = 512  # per lane; threads are made only while that many pings are under way
MIN_WAIT = 0.01  # the liveness thread never sleeps less than this

log = logging.getLogger(__name__)


class Refusals:
    """The hosts no new joiner starts on, each for its cooldown: the fork's ``_refused`` dict
    (``refused[host] = why``, ``host in refused``, iteration, ``del``), with an end. The clock
    is read here; the rule is ``Cooldowns``'. ``released(host, after)`` is told of each end."""

    def __init__(self, cooldowns: Cooldowns, released: Callable[[str, float], None],
                 clock: Callable[[], float] = time.monotonic):
        self._cooldowns = cooldowns
        self._released = released
        self._clock = clock

    def _expire(self) -> None:
        out = self._cooldowns.hosts()
        for release in self._cooldowns.due(self._clock(), listed=out, running=()):
            self._released(release.host, release.after)

    def __setitem__(self, host: str, why: str) -> None:
        self._cooldowns.keep_out(host, why, self._clock())

    def __getitem__(self, host: str) -> str:
        self._expire()
        why = self._cooldowns.why(host)
        if why is None:
            raise KeyError(host)
        return why

    def __contains__(self, host: object) -> bool:
        self._expire()
        return isinstance(host, str) and self._cooldowns.is_out(host)

    def __delitem__(self, host: str) -> None:
        self._cooldowns.forget(host)

    def __iter__(self) -> Iterator[str]:
        self._expire()
        return iter(self._cooldowns.hosts())

    def __len__(self) -> int:
        self._expire()
        return len(self._cooldowns.hosts())


class ElasticDriver(horovod_driver.ElasticDriver):
    """The fork's driver, its liveness decisions made by ``Liveness``. Thread-safe: the core
    is only touched under ``_core_lock``."""

    _pings: ThreadPoolExecutor
    _suspect_pings: ThreadPoolExecutor
    # seconds after its stop at which the process ends (exit_after_stop); None: never (a driver
    # embedded in another process, as in tests). install() sets STOP_EXIT_AFTER: horovodrun's.
    exit_after_stop: float | None = None
    # set (install(adopt_window=...)): this driver takes over the running world at its start
    # (``adopter``), waiting for it up to half the workers' adoption window; None: it starts one
    adopt_window: float | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._adopter: Adopter | None = None  # before the fork's threads ask _world_assignments
        self._rank_gate = RankGate()  # closed while adopting (before the rendezvous serves)
        if self.adopt_window is not None:
            self._rank_gate.close()
        self._core_lock = threading.Lock()
        self._core: Liveness | None = None
        self._core_ready = threading.Event()
        self._heard_fed: dict[tuple[str, int], float] = {}
        # quarantines (a worker lost for silence), under _core_lock; their rule is Cooldowns'.
        # Made first: the fork's __init__ starts the discovery thread, which ends quarantines
        self._quarantines = Cooldowns(base=horovod_driver.QUARANTINE_SECS, longest=horovod_driver.QUARANTINE_MAX_SECS)
        super().__init__(*args, **kwargs)
        # one sender per ping under way: replace the fork's 4 + 4
        old = (self._pings, self._suspect_pings)
        self._pings = ThreadPoolExecutor(max_workers=PING_SENDERS, thread_name_prefix='liveness-ping')
        self._suspect_pings = ThreadPoolExecutor(max_workers=PING_SENDERS,
                                                 thread_name_prefix='liveness-ping-suspect')
        for pool in old:
            pool.shutdown(wait=False, cancel_futures=True)
        base = self._quarantine_secs if self._quarantine_secs > 0 else horovod_driver.QUARANTINE_SECS
        # the joins' core: its refusals are the fork's _refused (read under _wait_hosts_cond)
        self._joins = Joins(JoinSettings(deadline=self._join_deadline, sibling_wait=self._sibling_wait,
                                         refusal=base, longest=horovod_driver.QUARANTINE_MAX_SECS))
        self._refused = Refusals(self._joins.refusals, self._refusal_ended)
        self._quarantines.base = base
        self._core_ready.set()

    def start(self, num_proc: int, create_worker_fn: Any) -> None:
        """The fork's start; with ``adopt_window`` set, the running world is taken over first
        (``adopt``)."""
        if self.adopt_window is not None:
            create_worker_fn = self.adopt(create_worker_fn, self.adopt_window / 2)
        super().start(num_proc, create_worker_fn)

    def adopt(self, create_worker_fn: Any, within: float) -> Any:
        """Take over the running world whose workers ask to be adopted (``Adopter``), waiting
        up to ``within`` seconds for it to be whole: the first world is then that one (its
        ranks where they are, no process started for it) and horovodrun's ``create_worker_fn``
        is returned wrapped. A world not whole by then is not guessed at: one line says what
        was missing, the unadopted workers end at their window (their claims refused), and
        once none asks any more the job starts as without adoption (``create_worker_fn``
        unchanged)."""
        started = time.monotonic()
        adopter = Adopter(self, lease_answers.installed())
        decision = adopter.learn(started + within)
        waited = round(time.monotonic() - started, 3)
        if isinstance(decision, AdoptInReset):
            hosts = [f"{host}:{sum(1 for h, _ in decision.slots if h == host)}" for host in decision.host_order()]
            self._host_manager.prefer_order(decision.host_order())
            self._events.emit(Kind.ADOPTED.value, world_size=len(decision.slots), hosts=hosts, commits=None,
                              between_worlds=True, waited=waited)
            print(f"horovodrun: adopted the running world's {len(decision.slots)} workers between two worlds "
                  f"({', '.join(hosts)}) after {waited:.1f} s: the next world forms with them",
                  file=sys.stderr, flush=True)
            return adopter.create_worker_fn(create_worker_fn)
        if not isinstance(decision, Adopt):
            self._rank_gate.refuse()
            self._events.emit(Kind.ADOPTION_FAILED.value, reason=decision.reason, waited=waited)
            print(f"horovodrun: could not adopt the running world: {decision.reason}; starting the job again "
                  "once its workers have ended", file=sys.stderr, flush=True)
            adopter.wait_unadopted_gone(time.monotonic() + 2 * within + STOP_EXIT_AFTER)
            return create_worker_fn
        world = decision.world
        slots: dict[str, int] = {}
        for place in world:
            slots[place.host] = slots.get(place.host, 0) + 1
        hosts = [f"{host}:{slots[host]}" for host in decision.host_order()]
        self._host_manager.prefer_order(decision.host_order())
        self._adopter = adopter
        self._events.emit(Kind.ADOPTED.value, world_size=len(world), hosts=hosts,
                          commits=max(p.commits for p in world), between_worlds=False, waited=waited)
        print(f"horovodrun: adopted the running world of {len(world)} workers ({', '.join(hosts)}) "
              f"after {waited:.1f} s", file=sys.stderr, flush=True)
        return adopter.create_worker_fn(create_worker_fn)

    def wait_to_join(self, host: str, slot: int, timeout: float) -> bool | None:
        """The fork's, after the rank gate: while the running world is being adopted a rank
        request waits (a worker between two worlds asks before the world it joins exists);
        once the adoption failed it is told it is in no world (True with no assignment: the
        invalid slot)."""
        state = self._rank_gate.state
        while state == CLOSED:
            state = self._rank_gate.wait(timeout)
        if state == REFUSING:
            return True
        return super().wait_to_join(host, slot, timeout)

    def _start_worker_processes(self, pending_slots: Any) -> None:
        """The fork's, after opening the rank gate: the world's registration barrier is set
        up by now (the caller reset the registry), so rank requests held there go on."""
        self._rank_gate.open()
        super()._start_worker_processes(pending_slots)

    def _world_assignments(self, current_hosts: Any) -> Any:
        """The fork's, except for the first world of an adoption: the adopted one, every rank
        where it is (each place's own ranks, as the workers answered)."""
        adopter = self._adopter
        if adopter is not None and not self._host_assignments:
            return adopter.assignments()
        return super()._world_assignments(current_hosts)

    def stop(self, error_message: str | None = None) -> None:
        """The fork's stop, and a bound on what follows it (``STOP_EXIT_AFTER``)."""
        with self._core_lock:
            armed, self._stop_armed = getattr(self, '_stop_armed', False), True
        if not armed and self.exit_after_stop is not None:
            threading.Thread(target=exit_after_stop, args=(self, error_message, self.exit_after_stop), daemon=True,
                             name='exit-after-stop').start()
        super().stop(error_message)

    def _abort_collectives(self, reason: str, skip: Any = ()) -> None:
        """The fork's abort, only while this launcher leads (``elastic.driver.leading``): a
        leader woken from a pause past its Lease sees its workers' ssh sessions gone, and the
        world it would abort is the next leader's."""
        if not still_leads():
            log.info('not aborting the world (%s): this launcher no longer leads the job', reason)
            self._events.emit(Kind.ABORT_WITHHELD.value, reason=reason)
            return
        super()._abort_collectives(reason, skip)

    def get_worker_client(self, slot_info: Any) -> Any:
        """The fork's client of a worker's notification service (host changes go through it),
        none once this launcher no longer leads (``elastic.driver.leading``)."""
        if not still_leads():
            return None
        return super().get_worker_client(slot_info)

    def _refusal_ended(self, host: str, after: float) -> None:
        logging.info('host %s: its refusal is over (%.1f s): it gets joiners again', host, after)
        self._events.emit(Kind.REFUSAL_ENDED.value, host=host, after=round(after, 3))

    # -- the fork's hooks (0111): a worker's exit and check-in feed the detector -----------------
    def worker_exited(self, key: tuple[str, int], exit_code: int) -> None:
        """Hook (the fork calls it first when a process it started exits): the detector forgets
        the slot at once, so a new process there starts with no silence of the old one's (the
        liveness thread would forget it only at its next round, after which a process that
        registered meanwhile inherited the old one's failed pings)."""
        with self._core_lock:
            self._heard_fed.pop(key, None)
            if self._core is not None and key in self._core.watched:
                self._core.watch(self._core.watched - {key}, time.monotonic())

    def worker_checked_in(self, host: str, slot: int) -> None:
        """Hook (the fork calls it once a check-in at the registration barrier is counted): a
        check-in is a sign of life, as a ping's answer is: the worker's silence, if any, starts
        again from now."""
        key = (host, slot)
        with self._workers_lock:
            worker = self._workers.get(key)
        with self._core_lock:
            if self._core is not None and key in self._core.watched:
                self._core.heard(key, time.monotonic())
                if worker is not None:
                    worker.unanswered_since = self._core.silent_since(key)

    # -- joins: a joiner stranded above a failed sibling's slot is dropped ------------------------
    def discovery_round(self, update_res: Any) -> None:
        """Hook (the end of each discovery round, holding ``_wait_hosts_cond``): drop the joiners
        the joins' core finds stranded: waiting above a slot of their host that has neither a
        member of the world nor a joiner, the host refused (its joiner there failed). A host's
        slots are taken in as a prefix, so such a joiner could join only once that slot has a
        worker again, after the refusal: it would wait that long holding its memory. Its host
        is not refused for it; after the refusal every free slot there gets a joiner again."""
        refused = list(self._refused)  # ends the refusals that are over first
        if not refused:
            return
        members = {(host, slot.local_rank) for host, slots in self._host_assignments.items() for slot in slots}
        with self._workers_lock:
            joiners = {key: worker for key, worker in self._workers.items()
                       if worker.joining is not None and worker.joining.taken is None
                       and worker.joining.dropped is None and worker.lost is None}
            views = {key: View(ready=worker.joining.ready is not None) for key, worker in joiners.items()}
        for key in stranded(views, members, refused):
            gap = next(s for s in range(key[1]) if (key[0], s) not in views and (key[0], s) not in members)
            self._drop_joiner(key, joiners[key], f'slot {gap} of its host has no worker and gets none while the host '
                              f'is refused ({self._joins.refusals.why(key[0])}): it cannot be taken in',
                              refuse=False)

    # -- quarantine: decided by Cooldowns, kept in the fork's HostManager -------------------------
    def quarantine_host(self, host: str, reason: str) -> bool:
        """Hook (the fork's ``_quarantine`` asks it): a worker on host was lost for silence: no
        new worker there for its cooldown (``Cooldowns``: doubling in a row). The HostManager
        keeps the host out of the assignment order meanwhile; ``release_quarantines`` lets it
        back. A quarantine of 0 s (``HOROVOD_ELASTIC_QUARANTINE_SECONDS=0``) is the fork's
        (False): until it leaves discovery."""
        if self._quarantine_secs <= 0:
            return False
        now = time.monotonic()
        with self._core_lock:
            until = self._quarantines.keep_out(host, reason, now)
            count = self._quarantines.in_a_row(host)
        cooldown = round(until - now, 3)
        self._host_manager.quarantine(host, cooldown)
        self._events.emit(Kind.QUARANTINE.value, host=host, reason=reason, cooldown=cooldown, count=count)
        return True

    def release_quarantines(self) -> bool | None:
        """Hook (the fork's discovery round asks it, holding ``_wait_hosts_cond``): probation.
        ``Cooldowns.due`` releases each host whose cooldown is over, that is still listed and
        where none of the driver's workers still runs: a quarantined host is out of the world,
        so its healthy slots leave it too, and a slot gets a new worker only once its old one
        has ended. Returns whether any host was released; None (the fork's rule) without
        quarantine cooldowns."""
        if self._quarantine_secs <= 0:
            return None
        listed = self._host_manager.current_hosts.host_slots
        with self._workers_lock:
            running = {key[0] for key in self._workers}
        with self._core_lock:
            releases = self._quarantines.due(time.monotonic(), listed=listed, running=running)
        for release in releases:
            self._host_manager.release_quarantine(release.host)
            after = round(release.after, 3)
            logging.info('quarantined host %s is still listed and its workers have ended: it gets a '
                         'worker again (%s s after its quarantine)', release.host, after)
            self._events.emit(Kind.QUARANTINE_ENDED.value, host=release.host, after=after)
        return bool(releases)

    # -- the registration barrier's deadline: decided by elastic.driver.barrier -----------------
    def barrier_deadline_arms(self, checked_in: int, size: int) -> bool:
        """Asked by the fork's registration (under its lock) at each check-in."""
        return barrier.arms(checked_in, size)

    def _unrecorded(self, recorded: Any) -> list:
        """The fork's (running, registered, not lost, not checked in), without joiners not yet
        in a world: waiting idle for admission is what a joiner does, and its join deadline,
        not the barrier, gives it up."""
        return [(key, worker) for key, worker in super()._unrecorded(recorded) if worker.joining is None]

    def lose_unrecorded_workers(self, recorded: Any, reason: str, baseline: dict | None = None) -> Any:
        """The deadline passed for the workers not in recorded: ``barrier.judge`` against
        baseline (``unrecorded_progress``'s samples when it armed); the silent and the idle are
        lost, the busy kept. Returns the kept workers' samples, the next deadline's baseline.
        Without baseline (a registry that does not sample): every one is lost."""
        if baseline is None:
            return self.lose_workers([key for key, _ in self._unrecorded(recorded)], reason)
        samples = self.unrecorded_progress(recorded)
        verdict = barrier.judge({key: barrier.Sample.of(value) for key, value in baseline.items()},
                                {key: barrier.Sample.of(value) for key, value in samples.items()})
        for key, sample in verdict.kept.items():
            before = barrier.Sample.of(baseline.get(key))
            cpu = None if before is None or before.cpu is None or sample.cpu is None else sample.cpu - before.cpu
            io = None if before is None or before.io is None or sample.io is None else sample.io - before.io
            logging.info('%s[%s] %s, but its main thread is busy (%s s of CPU, %s bytes of I/O since the '
                         'last check): kept, judged again at the next deadline', key[0], key[1], reason,
                         'unknown' if cpu is None else f'{cpu:.2f}', 'unknown' if io is None else io)
            self._events.emit(Kind.BARRIER_BUSY.value, host=key[0], slot=key[1],
                              cpu=None if cpu is None else round(cpu, 3), io=io)
        if verdict.silent:
            self.lose_workers(list(verdict.silent), f'{reason}, and no answer to the progress request')
        if verdict.idle:
            self.lose_workers(list(verdict.idle), f'{reason}, and its main thread made no progress')
        return {key: samples[key] for key in verdict.kept}

    # -- the liveness thread: observe, decide (the core), execute --------------------------------
    def liveness_loop(self) -> bool:
        """Hook (the fork's liveness thread runs it once liveness is on): the thread's body,
        until the driver stops; True: the fork's loop does not run."""
        self._core_ready.wait()
        core = Liveness(Settings(timeout=self._liveness_timeout, ping_timeout=self._ping_timeout,
                                 interval=horovod_driver.LIVENESS_INTERVAL_SECS, lag_limit=self._lag_limit))
        with self._core_lock:
            self._core = core
        wait = horovod_driver.LIVENESS_INTERVAL_SECS
        while True:
            slept = time.monotonic()
            self._liveness_wakeup.wait(wait)
            self._liveness_wakeup.clear()
            if self._shutdown.is_set():
                return True
            now = time.monotonic()
            late = max(0.0, now - slept - wait)
            with self._workers_lock:
                watched = {key: worker for key, worker in self._workers.items()
                           if worker.client is not None and worker.lost is None and not worker.done
                           and not worker.expired}
            watched = {key: worker for key, worker in watched.items() if self.has_rank_assignment(*key)}
            with self._core_lock:
                core.watch(watched, now)
                for key, worker in watched.items():
                    heard = worker.heard
                    if heard is not None and heard > self._heard_fed.get(key, float('-inf')):
                        self._heard_fed[key] = heard
                        core.heard(key, heard)
                        worker.unanswered_since = core.silent_since(key)
                decisions, due = core.tick(now, late=late)
            for decision in decisions:
                if isinstance(decision, Ping):
                    for key in decision.keys:
                        if not self._send_ping(watched[key]):
                            return True
                elif isinstance(decision, Lose):
                    self._lose_silent(decision, watched, now)
                elif isinstance(decision, Rebaseline):
                    self._rebaseline(now, decision.reason, silent=decision.silent, world=decision.world)
            wait = max(MIN_WAIT, due - time.monotonic())

    def _lose_silent(self, decision: Lose, watched: dict, now: float) -> None:
        keys: list[Any] = list(decision.keys)
        with self._workers_lock:
            for key in keys:
                watched[key].expired = True
        for host in sorted({key[0] for key in keys}):
            self._quarantine(host, decision.reason)
        threading.Thread(target=self.lose_workers, args=(keys, decision.reason), daemon=True,
                         name='lose-{}-{}'.format(*keys[0])).start()

    def _key(self, worker: Any) -> tuple[str, int]:
        return worker.slot_info.hostname, worker.slot_info.local_rank

    def _send_ping(self, worker: Any) -> bool:
        """Queue a ping to worker: on the suspects' lane when the core suspects it. False when
        the driver is stopping."""
        key = self._key(worker)
        with self._core_lock:
            suspected = self._core is not None and self._core.suspected(key)
        pool = self._suspect_pings if suspected else self._pings
        try:
            worker.ping = pool.submit(self._ping, worker, self._ping_timeout)
        except RuntimeError:  # the driver is stopping
            with self._core_lock:
                if self._core is not None:
                    self._core.dropped(key)
            return False
        return True

    def _ping(self, worker: Any, timeout: float) -> None:
        """Send one ping and tell the core how it went. The fork's ``unanswered_since`` (read by
        its leave path and its aborts) is the core's ``silent_since``, copied under the core's
        lock after each observation: one truth, which a re-baseline clears in both at once (a
        ping thread that wrote its own could leave a value from before the re-baseline)."""
        key = self._key(worker)
        sent = time.monotonic()
        try:
            commits = worker.client.ping(timeout)
        except Exception:
            with self._core_lock:
                if self._core is not None:
                    self._core.failed(key, sent)
                    worker.unanswered_since = self._core.silent_since(key)
            self._liveness_wakeup.set()  # the core may now decide a loss
            return
        worker.last_seen = max(worker.last_seen or 0.0, sent)
        with self._core_lock:
            if self._core is not None:
                self._core.answered(key, sent)
                worker.unanswered_since = self._core.silent_since(key)
        if commits is not None and commits != worker.commits:
            worker.commits = commits
            if commits:
                self.record_progress(key[0], key[1], commits, heard=False)

    def _ping_now(self, hosts: Any) -> None:
        """Ping every watched worker on hosts (a host left discovery): the leave path measures
        their silence. The core hears of these pings' failures like any other's."""
        if self._liveness_timeout <= 0:
            return
        with self._workers_lock:
            watched = [worker for key, worker in self._workers.items()
                       if key[0] in hosts and worker.client is not None and worker.lost is None
                       and not worker.done]
        for worker in watched:
            if worker.ping is None or worker.ping.done():
                if not self._send_ping(worker):
                    return


def exit_after_stop(driver: Any, error_message: str | None, after: float | None = None,
                    exit_: Callable[[int], Any] = os._exit) -> None:
    """Wait ``after`` (``STOP_EXIT_AFTER``) seconds, then end the process (a daemon thread: a
    process that exits by itself never gets here): one line naming the threads that still
    wait, exit 1 when the job failed (an error, or a worker that exited non-zero), else 0."""
    time.sleep(STOP_EXIT_AFTER if after is None else after)
    results = dict(getattr(driver._results, '_worker_results', {}))
    failed = error_message is not None or any(value[0] != 0 for value in results.values())
    waiting = sorted(t.name for t in threading.enumerate()
                     if t is not threading.current_thread() and not t.daemon and t.is_alive())
    try:
        sys.stdout.flush()
        sys.stderr.write('elastic driver: horovodrun still runs {:g} s after its driver stopped (waiting: {}); '
                         'exiting\n'.format(STOP_EXIT_AFTER if after is None else after,
                                           ', '.join(waiting) or 'nothing'))
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    exit_(1 if failed else 0)


def install(run_id: str | None = None, adopt_window: float | None = None) -> None:
    """Make horovodrun's elastic launcher (``horovod.runner.gloo_run``) build this driver and
    make the rendezvous server answer the lease wrappers of run ``run_id`` (``lease_answers``);
    with ``adopt_window`` (the seconds the workers wait to be adopted), the driver takes over
    the running world at its start (``ElasticDriver.adopt``)."""
    from horovod.runner import gloo_run
    from horovod.runner.http import http_server
    gloo_run.ElasticDriver = ElasticDriver
    ElasticDriver.exit_after_stop = STOP_EXIT_AFTER  # this process is horovodrun: end it after the stop
    ElasticDriver.adopt_window = adopt_window
    # a handler thread waiting on a kept lease connection must not hold the process at exit
    http_server.RendezvousHTTPServer.daemon_threads = True
    lease_answers.install(run_id)
    log.debug('elastic driver: the project failure detector is installed')
