"""Admission: run ``--prepare-cmd CMD -- HOST`` once per pod incarnation (uid) before serving it.

The command is split like a shell would (``shlex``) and run without a shell, with ``--``
and the host appended as the last two arguments (the host is pod-controlled: after ``--``
no command reads it as an option; it is also checked again with ``hosts.servable`` and a
host that fails is never passed), and with the pod incarnation it prepares named in its
environment (on top of the daemon's own): ``DISCOVERY_POD_UID``, ``DISCOVERY_POD_NAME`` and
``DISCOVERY_POD_NAMESPACE`` -- the API server's word that HOST now belongs to this pod, which
lets the command replace state it keeps per address (``ssh-bootstrap hosts --repin-for-uid``
re-pins a reused pod IP's host key). At most ``concurrency`` run at once; a non-zero exit
or a timeout is retried up to ``retries`` more times with a growing delay; after that the
pod is reported as skipped with the last failure as the reason, and the command is tried again
``recheck`` seconds later, then at doubling intervals up to ``recheck_max``, for as long as the
pod exists (``recheck`` 0: never again until its uid changes). A Ready pod whose preparation
failed for a passing cause (its sshd still starting, a network blip, a full disk freed) is
served once a later try succeeds: a failure never leaves a healthy pod unused for the rest of
the run. With a ``gate`` (``discovery.leader_gate``) every attempt first waits until this pod
leads the job.

Owned by the asyncio side: every method must be called from the event loop's thread.
``request`` never blocks (it starts the preparation task of a new uid); ``states`` is the
read-only state by uid the table builder takes as a value; ``take_changed`` hands over the uids
whose state changed since the last call; ``aclose`` cancels running commands (their processes
are killed).

With ``admitted_file`` (``--admitted-file``) the uids admitted so far are kept in that file
(one per line, replaced atomically after every change), and a daemon started again with the
same file (restarted by ``elastic-run`` after a crash, or a sidecar container restarted by the
kubelet, the file on a volume that outlives the container) admits those uids at once, without
running the command again: what the command prepared (pinned keys, the dataset) outlives the
daemon, and a host that had to be prepared again would leave the served list for the time it
takes, which horovodrun would take for a scale-down. A missing file is an empty one; a line
that is not a uid is ignored with a warning; a failed write is logged, never fatal.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import shlex
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from discovery.environment import DISCOVERY_POD_NAME, DISCOVERY_POD_NAMESPACE
from discovery.errors import ConfigError
from discovery.hosts import Host, escape, servable
from discovery.leader_gate import LeaderGate
from discovery.table import ADMITTED, PREPARING
from shared.atomicfile import write_atomic
from shared.discovery_wire import PREPARE_FAILED
from shared.environment import DISCOVERY_POD_UID

log = logging.getLogger("discovery.admission")
UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,127}$")  # what Kubernetes' uids (RFC 4122) and ours look like


@dataclass(frozen=True)
class PrepareSettings:
    command: tuple[str, ...]
    concurrency: int = 4
    retries: int = 2
    retry_delay: float = 1.0
    timeout: float = 600.0
    admitted_file: str | None = None
    recheck: float = 30.0
    recheck_max: float = 300.0

    @classmethod
    def parse(cls, command: str, *, concurrency: int = 4, retries: int = 2, retry_delay: float = 1.0,
              timeout: float = 600.0, admitted_file: str | None = None, recheck: float = 30.0,
              recheck_max: float = 300.0) -> PrepareSettings:
        """Split ``command``; ``ConfigError`` naming the bad value if it is empty or unbalanced."""
        try:
            argv = tuple(shlex.split(command))
        except ValueError as e:
            raise ConfigError(f"bad --prepare-cmd {command!r}: {e}") from e
        if not argv:
            raise ConfigError("--prepare-cmd is empty")
        s = cls(argv, concurrency=concurrency, retries=retries, retry_delay=retry_delay, timeout=timeout,
                admitted_file=admitted_file, recheck=recheck, recheck_max=max(recheck, recheck_max))
        if admitted_file and not os.path.isdir(os.path.dirname(os.path.abspath(admitted_file))):
            raise ConfigError(f"--admitted-file directory does not exist: {admitted_file}")
        if s.concurrency < 1:
            raise ConfigError(f"--prepare-concurrency must be >= 1, got {s.concurrency}")
        if s.retries < 0:
            raise ConfigError(f"--prepare-retries must be >= 0, got {s.retries}")
        if not s.recheck >= 0:
            raise ConfigError(f"--prepare-recheck must be >= 0, got {s.recheck:g}")
        return s


def prepare_env(host: Host, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus ``DISCOVERY_POD_UID``/``_NAME``/``_NAMESPACE`` naming ``host``'s pod (pure)."""
    return {**base, DISCOVERY_POD_UID: host.uid, DISCOVERY_POD_NAME: host.pod,
            DISCOVERY_POD_NAMESPACE: host.namespace}


class Admission:
    """Per-uid preparation state and the tasks that run the command."""

    def __init__(self, settings: PrepareSettings, on_change: Callable[[], None],
                 gate: LeaderGate | None = None) -> None:
        self.settings = settings
        self._on_change = on_change
        self.gate = gate  # each attempt waits until this pod leads (discovery.leader_gate)
        self._state: dict[str, str] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._changed: set[str] = set()
        self.states: Mapping[str, str] = MappingProxyType(self._state)
        self._sem: asyncio.Semaphore | None = None
        self.runs = 0          # command executions started
        self.failures = 0      # executions that did not exit 0
        self._remembered = read_admitted(settings.admitted_file) if settings.admitted_file else set()

    def request(self, host: Host) -> str:
        """``ADMITTED`` | ``PREPARING`` | ``"prepare failed: ..."``; starts preparation if new."""
        st = self._state.get(host.uid)
        if st is None and host.uid in self._remembered:
            self._state[host.uid] = st = ADMITTED
            self._changed.add(host.uid)  # the table takes it in at the next publish
            self._on_change()
            log.info("admitted before (--admitted-file)", extra={"fields": {"pod": host.pod, "host": host.host,
                                                                            "uid": host.uid}})
        if st is None:
            self._state[host.uid] = st = PREPARING
            if self._sem is None:
                self._sem = asyncio.Semaphore(self.settings.concurrency)
            self._tasks[host.uid] = asyncio.get_running_loop().create_task(
                self._prepare(host), name=f"prepare {host.pod}")
        return st

    def take_changed(self) -> set[str]:
        """The uids whose state changed (a preparation ended) since the last call."""
        changed, self._changed = self._changed, set()
        return changed

    def forget(self, gone_uids: Iterable[str]) -> None:
        """Drop state (and cancel work) for uids whose pods no longer exist."""
        gone = [u for u in gone_uids if u in self._state]
        for uid in gone:
            del self._state[uid]
            task = self._tasks.pop(uid, None)
            if task is not None:
                task.cancel()
        if gone and self.settings.admitted_file:
            self._remembered.difference_update(gone)
            self._persist()

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def _prepare(self, host: Host) -> None:
        s = self.settings
        try:
            attempts, failed = 0, ""
            for attempt in range(s.retries + 1):
                if attempt:
                    await asyncio.sleep(s.retry_delay * attempt)
                attempts += 1
                failed = await self._attempt(host, attempts)
                if not failed:
                    return
            delay = s.recheck
            while delay > 0:  # a Ready pod is never given up on while it exists
                self._finish(host.uid, f"{failed} (next try in {delay:g} s)")
                await asyncio.sleep(delay)
                attempts += 1
                failed = await self._attempt(host, attempts)
                if not failed:
                    return
                delay = min(delay * 2, s.recheck_max)
            self._finish(host.uid, failed)
        finally:
            if self._tasks.get(host.uid) is asyncio.current_task():
                del self._tasks[host.uid]

    async def _attempt(self, host: Host, attempt: int) -> str:
        """Run the command once (within the concurrency bound): "" when ``host`` is admitted,
        else the failure (``prepare failed after N attempts: reason``)."""
        assert self._sem is not None
        if self.gate is not None:
            await self.gate.wait()
        async with self._sem:
            ok, reason = await self._run_once(host)
        if ok:
            log.info("prepared", extra={"fields": {"pod": host.pod, "host": host.host,
                                                   "uid": host.uid, "attempt": attempt}})
            self._finish(host.uid, ADMITTED)
            return ""
        log.warning("prepare failed", extra={"fields": {
            "pod": host.pod, "host": host.host, "attempt": attempt, "reason": reason}})
        return f"{PREPARE_FAILED} after {attempt} attempts: {reason}"

    def _finish(self, uid: str, state: str) -> None:
        if uid in self._state:
            self._state[uid] = state
            self._changed.add(uid)
            if state == ADMITTED and self.settings.admitted_file:
                self._remembered.add(uid)
                self._persist()
            self._on_change()

    def _persist(self) -> None:
        """Write the admitted uids to ``admitted_file`` (atomically; a failure is logged)."""
        path = self.settings.admitted_file
        assert path is not None
        uids = sorted(u for u, st in self._state.items() if st == ADMITTED) + sorted(
            u for u in self._remembered if u not in self._state)
        try:
            write_atomic(path, "".join(f"{u}\n" for u in uids))
        except OSError as e:
            log.warning("cannot write --admitted-file", extra={"fields": {"path": path, "error": str(e)}})

    async def _run_once(self, host: Host) -> tuple[bool, str]:
        if not servable(host.host):
            self.failures += 1
            return False, f"refused to prepare a bad host {escape(host.host)}"
        self.runs += 1
        argv = [*self.settings.command, "--", host.host]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=prepare_env(host, os.environ), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as e:
            self.failures += 1
            return False, f"cannot run {argv[0]!r}: {e.strerror or e}"
        try:
            _, err = await asyncio.wait_for(proc.communicate(), self.settings.timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the command and anything it started
            except ProcessLookupError:
                pass
            await proc.wait()
            if isinstance(e, asyncio.CancelledError):
                raise
            self.failures += 1
            return False, f"timed out after {self.settings.timeout:g}s"
        if proc.returncode == 0:
            return True, ""
        self.failures += 1
        tail = err.decode(errors="replace").strip().splitlines()
        last = tail[-1][:200] if tail else ""
        return False, f"exit {proc.returncode}" + (f": {last}" if last else "")


def read_admitted(path: str) -> set[str]:
    """The uids listed in ``path`` (a missing or unreadable file: none; lines that are not
    uids are skipped with a warning)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return set()
    except OSError as e:
        log.warning("cannot read --admitted-file", extra={"fields": {"path": path, "error": str(e)}})
        return set()
    uids = {line.strip() for line in lines if UID.match(line.strip())}
    bad = sum(1 for line in lines if line.strip() and not UID.match(line.strip()))
    if bad:
        log.warning("--admitted-file lines skipped: not uids", extra={"fields": {"path": path, "lines": bad}})
    return uids
