"""The driver's adopt mode: take over a running world instead of starting one (what a launcher
that took over the job from a lost leader runs).

Runs inside horovodrun's process, beside the driver (``elastic_driver.ElasticDriver`` calls it
when ``adopt_window`` is set). The rule is ``elastic.driver.adoption.decide``; this module
observes and executes:

- ``learn`` gathers, until the world is whole (or lost between two worlds: ``AdoptInReset``)
  or its deadline passes, the slots whose lease
  wrapper asks to be adopted (``lease_answers.Answers.waiting``, asked within ``FRESH_SECS``)
  and each one's place in its world, asked of its notification service once it registered
  with this driver (fork patch 0112: a worker no longer pinged registers again; then
  ``worker_world``);
- ``create_worker_fn`` wraps horovodrun's: an adopted slot's "process" is the running one,
  adopted on the lease wire (``Answers.adopt``); it ends when its wrapper reports the
  training's exit (``Answers.take_exits``, fed to the driver as the exit of a process it
  started) or when the driver ends it (a stop, its host gone, lost): the wrapper is let go
  (``Answers.release``) and ends at its lease. Every other slot (a joiner, a replacement)
  starts as horovodrun starts it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from elastic.driver.adoption import Adopt, AdoptInReset, GiveUp, Place, Slot, Wait, decide
from elastic.driver.lease_answers import Answers, Claim

FRESH_SECS = 5.0  # a claim asked longer ago than this is a wrapper that has ended
POLL_SECS = 0.25  # how often learn looks again, and the exits are collected
ASKERS = 16  # world questions under way at once (each bounded by the request deadline)

log = logging.getLogger(__name__)


class Adopter:
    """The adoption of one driver: ``learn`` once, then ``create_worker_fn``. ``driver`` is the
    fork's ``ElasticDriver`` (its ``knows_worker_server`` and ``_worker_clients``, 0112)."""

    def __init__(self, driver: Any, answers: Answers, clock: Callable[[], float] = time.monotonic) -> None:
        self._driver = driver
        self._answers = answers
        self._clock = clock
        self._claims: dict[Slot, Claim] = {}
        self._exits: dict[Claim, int] = {}
        self._exited = threading.Condition()
        self._collector: threading.Thread | None = None
        self.world: Adopt | None = None  # the world adopted whole (its ranks kept)

    def _fresh_claims(self, now: float) -> dict[Slot, Claim]:
        claims: dict[Slot, Claim] = {}
        for claim, asked in self._answers.waiting().items():
            if now - asked <= FRESH_SECS:
                known = claims.get((claim.host, claim.slot))
                if known is None or claim.pid != known.pid:  # two processes on a slot: the newest asks
                    claims[(claim.host, claim.slot)] = claim
        return claims

    def _ask(self, slot: Slot) -> tuple[bool, Place | None]:
        """(answered, the place the worker at slot answers: None between two worlds); not
        answered when it cannot be asked (not registered with this driver yet) or did not
        answer in time."""
        client = self._driver._worker_clients.get(slot) if self._driver.knows_worker_server(*slot) else None
        if client is None:
            return False, None
        try:
            answer = client.worker_world()
        except Exception as exc:  # a worker that does not answer in time: asked again next round
            log.debug("adoption: %s[%s] did not say where it is: %s", slot[0], slot[1], exc)
            return False, None
        return True, Place.from_answer(slot, answer.ranks, answer.commits)

    def learn(self, deadline: float) -> Adopt | AdoptInReset | GiveUp:
        """Wait until the claimed slots make a whole world (``Adopt``, kept as ``world``), or
        are all between two worlds (``AdoptInReset``), or ``deadline`` (this clock's) passes
        (``GiveUp``). A slot is asked again while it has not answered or answered between two
        worlds."""
        places: dict[Slot, Place | None] = {}
        claimed: frozenset[Slot] = frozenset()
        settled_since = self._clock()
        with ThreadPoolExecutor(ASKERS, thread_name_prefix="adopt-ask") as askers:
            while True:
                now = self._clock()
                claims = self._fresh_claims(now)
                if frozenset(claims) != claimed:
                    claimed, settled_since = frozenset(claims), now
                ask = [s for s in claims if places.get(s) is None]
                for slot, (answered, place) in zip(ask, askers.map(self._ask, ask), strict=True):
                    if answered:
                        places[slot] = place
                    else:
                        places.pop(slot, None)
                decision = decide(claims, places, self._clock(), deadline, settled_since)
                if isinstance(decision, Adopt):
                    self.world = decision
                    self._claims = {(p.host, p.slot): claims[(p.host, p.slot)] for p in decision.world}
                    return decision
                if isinstance(decision, AdoptInReset):
                    self._claims = {slot: claims[slot] for slot in decision.slots}
                    return decision
                if isinstance(decision, GiveUp):
                    return decision
                assert isinstance(decision, Wait)
                time.sleep(POLL_SECS)

    def wait_unadopted_gone(self, deadline: float) -> bool:
        """Wait until no wrapper has asked to be adopted for ``FRESH_SECS`` (the unadopted
        workers have ended at their window: a new world does not start beside them) or
        ``deadline`` passes; whether they are gone."""
        while self._fresh_claims(self._clock()):
            if self._clock() >= deadline:
                return False
            time.sleep(POLL_SECS)
        return True

    def assignments(self) -> tuple[dict[str, list[Any]], list[Any]]:
        """The adopted world as the fork's driver holds a world's assignments: (host -> its
        ``SlotInfo``s by local rank, every ``SlotInfo`` by rank), each with the ranks its worker
        answered."""
        from horovod.runner.common.util.hosts import SlotInfo
        assert self.world is not None, "learn has not adopted a world"
        by_host: dict[str, list[Any]] = {}
        by_rank = []
        for p in self.world.world:
            info = SlotInfo(hostname=p.host, rank=p.rank, local_rank=p.local_rank, cross_rank=p.cross_rank,
                            size=p.size, local_size=p.local_size, cross_size=p.cross_size)
            by_host.setdefault(p.host, []).append(info)
            by_rank.append(info)
        for infos in by_host.values():
            infos.sort(key=lambda info: info.local_rank)
        return by_host, by_rank

    def create_worker_fn(self, create_worker_fn: Callable[..., Any]) -> Callable[..., Any]:
        """horovodrun's ``create_worker_fn`` with the adopted slots' processes taken over: the
        first start of an adopted slot waits for the running process; any other start is
        horovodrun's."""
        def create(slot_info: Any, events: list[threading.Event], **kwargs: Any) -> Any:
            key = (slot_info.hostname, slot_info.local_rank)
            claim = self._claims.pop(key, None)
            if claim is None:
                return create_worker_fn(slot_info, events, **kwargs)
            return self._run_adopted(key, claim, events)
        return create

    def _run_adopted(self, key: Slot, claim: Claim, events: list[threading.Event]) -> tuple[int, float]:
        driver = self._driver
        with driver._workers_lock:
            worker = driver._workers.get(key)
            if worker is not None and worker.client is None:
                # registered before the driver counted it (learn asked it): the pings start now
                worker.client = driver._worker_clients.get(key)
                worker.last_seen = time.monotonic()
        self._answers.adopt(claim)
        self._start_collector()
        log.info("adoption: %s[%s] (pid %d on its host) adopted", key[0], key[1], claim.pid)
        with self._exited:
            while claim not in self._exits:
                if any(event.is_set() for event in events):
                    # the driver ends it (a stop, its host gone, lost): let it go; its wrapper
                    # is refused from now on and ends the training at its lease
                    self._answers.release(claim)
                    return 1, time.time()
                self._exited.wait(POLL_SECS)
            return self._exits.pop(claim), time.time()

    def _start_collector(self) -> None:
        with self._exited:
            if self._collector is not None:
                return
            self._collector = threading.Thread(target=self._collect_exits, name="adopted-exits", daemon=True)
        self._collector.start()

    def _collect_exits(self) -> None:
        """Move the exits the adopted wrappers report to the processes that wait for them."""
        while True:
            taken = self._answers.take_exits()
            if taken:
                with self._exited:
                    self._exits.update(taken)
                    self._exited.notify_all()
            time.sleep(POLL_SECS)
