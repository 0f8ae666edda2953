"""The discovery service: a host source, the publisher, admission and the hostfile.

Use as an async context manager (``async with DiscoveryService(source, rules) as svc``):
entering starts the source (a ``discovery.source.HostSource``: the Kubernetes watch for the
daemon, ``StaticFileSource`` for a fixed file) and the publisher task; leaving stops both and
cancels running prepare commands. Nothing starts in the constructor.

The source (the watch thread, for Kubernetes) only touches its own state and then *kicks* the
event loop (``call_soon_threadsafe``). The publisher task, on the loop, coalesces kicks: it
drains the pods changed since its last run from the source, feeds them (and the admission state, as a
value) to the incremental ``TableBuilder``, swaps the new ``HostTable`` into ``table`` (one
attribute assignment; handlers only read it), starts preparation for new hosts, writes the
hostfile when the hosts changed and wakes waiters. A publish costs in proportion to the pods
that changed (and the groups they are in), not to the pod count.

Staleness: while the source is disconnected the last table keeps being served; ``age()`` is
the seconds since the connection was lost (0 while connected) and ``stale`` is true once
that exceeds ``stale_after`` or the source has stopped for good.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable

from discovery.admission import Admission, PrepareSettings
from discovery.hostfile import HostfileWriter
from discovery.hosts import Rules
from discovery.leader_gate import LeaderGate
from discovery.source import HostSource
from discovery.status import WatchStatus
from discovery.table import EMPTY, HostTable, TableBuilder

log = logging.getLogger("discovery.service")
GIL_SWITCH_SECONDS = 0.0005


class DiscoveryService:
    """See the module docstring. All methods are for the event loop's thread."""

    def __init__(self, source: HostSource, rules: Rules, *, stale_after: float = 10.0,
                 hostfile: str | None = None, prepare: PrepareSettings | None = None,
                 prepare_gate: LeaderGate | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if stale_after <= 0:
            raise ValueError(f"stale_after must be > 0 seconds, got {stale_after}")
        self.rules = rules
        self.stale_after = stale_after
        self._clock = clock
        self.source = source
        self._builder = TableBuilder(rules)
        self._hostfile = HostfileWriter(hostfile) if hostfile else None
        self._prepare_settings = prepare
        self._prepare_gate = prepare_gate
        self.admission: Admission | None = None
        self.table: HostTable = EMPTY
        self.hostfile_errors = 0
        self.known_groups: set[str] = set()  # every group label value a selected pod ever carried
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: asyncio.Event | None = None
        self._published: asyncio.Condition | None = None
        self._switch_interval = sys.getswitchinterval()
        self._task: asyncio.Task[None] | None = None
        self.failed: asyncio.Event | None = None  # set once the watch has given up for good

    # -- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> DiscoveryService:
        # The watch thread parses events while the loop answers readers; a shorter GIL switch
        # interval (default 5 ms) lets a request in sooner. Restored on exit.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_SECONDS)
        self._loop = asyncio.get_running_loop()
        self._dirty = asyncio.Event()
        self._published = asyncio.Condition()
        self.failed = asyncio.Event()
        if self._prepare_settings is not None:
            self.admission = Admission(self._prepare_settings, self._kick, self._prepare_gate)
        self._task = self._loop.create_task(self._publish_loop(), name="publisher")
        self.source.start(self._kick_threadsafe)
        return self

    async def __aexit__(self, *exc: object) -> None:
        sys.setswitchinterval(self._switch_interval)
        assert self._loop is not None
        await self._loop.run_in_executor(None, self.source.stop)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.admission is not None:
            await self.admission.aclose()

    # -- state for handlers ----------------------------------------------------------------
    @property
    def status(self) -> WatchStatus:
        return self.source.status

    def age(self) -> float:
        """Seconds the served list may be out of date (0 while the watch is connected)."""
        since = self.source.status.disconnected_since
        return 0.0 if since is None else max(0.0, self._clock() - since)

    @property
    def stale(self) -> bool:
        s = self.source.status
        return bool(s.fatal) or not self.source.alive or self.age() > self.stale_after

    async def wait_for(self, predicate: Callable[[HostTable], bool], timeout: float) -> HostTable:
        """Block until a published table satisfies ``predicate``; ``asyncio.TimeoutError``."""
        published = self._published
        assert published is not None

        async def _wait() -> HostTable:
            async with published:
                await published.wait_for(lambda: predicate(self.table))
                return self.table
        return await asyncio.wait_for(_wait(), timeout)

    # -- publisher -------------------------------------------------------------------------
    def _kick_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._kick)
            except RuntimeError:  # the loop closed between the check and the call
                pass

    def _kick(self) -> None:
        if self._dirty is not None:
            self._dirty.set()

    async def _publish_loop(self) -> None:
        assert self._dirty is not None and self._published is not None
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                self._publish()
            except Exception:
                log.exception("publishing the host table failed; keeping the last one")
            if self.source.status.fatal and self.failed is not None:
                self.failed.set()
            async with self._published:
                self._published.notify_all()

    def _publish(self) -> None:
        if not self.source.status.synced:
            return
        changes = self.source.drain()
        adm = self.admission
        changed_uids = adm.take_changed() if adm is not None else ()
        if not changes and not changed_uids and self.table.synced:
            return
        delta = self._builder.apply(changes, adm.states if adm is not None else None, changed_uids)
        self.known_groups |= delta.groups
        if adm is not None:
            # forget an incarnation only when its pod is gone: a readiness flap keeps the uid
            adm.forget(delta.gone_uids)
            for h in delta.unprepared:
                adm.request(h)
        old = self.table
        table = self._builder.table(old.generation + 1)
        self.table = table
        if delta.hosts_changed or not old.synced:
            log.info("hosts", extra={"fields": {"hosts": table.served, "pods": table.pods_seen,
                                                "changed": len(changes)}})
        for s in delta.new_skips:
            log.warning("pod skipped", extra={"fields": {"pod": s.pod, "namespace": s.namespace,
                                                         "reason": s.reason}})
        if self._hostfile is not None and (delta.hosts_changed or not old.synced):
            try:
                self._hostfile.update(table.hosts)
            except OSError as e:
                self.hostfile_errors += 1
                log.error("hostfile write failed", extra={"fields": {"path": self._hostfile.path,
                                                                     "error": str(e)}})
