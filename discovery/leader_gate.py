"""The leader gate: a daemon beside a standby launcher prepares no host until its pod leads.

``--prepare-leader-lease NAMESPACE/NAME --prepare-leader-identity ID``: before each run of
``--prepare-cmd`` (every attempt and every later try) the daemon reads the job's
``coordination.k8s.io/v1`` Lease and goes on only while its ``holderIdentity`` is ID, the
identity this pod's launcher leads as (``elastic-run --leader-identity``). Until then the
host stays "preparing" (not served) and the command does not run: the prepare hook stops
the job's other runs on the host it prepares (``--reap-job``), so a standby's daemon that
prepared hosts would end the leader's workers. When the standby takes the Lease its daemon
prepares every host at once, and a pod whose launcher was fenced (the Lease taken from it)
prepares no more.

Each preparation goes on only on a read begun after it asked; preparations waiting together
share each read, once per ``interval`` (one read, however many wait); a missing Lease
(nobody has led yet) or a failed read is "not leading" (a failed read is logged once until a
read succeeds). ``LeaderGate`` takes the read as a function, so the rule is tested without an
API server; ``lease_holder`` is the official client's read.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from discovery.errors import ConfigError

log = logging.getLogger("discovery.leader_gate")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # a namespace or Lease name (DNS subdomain)
_IDENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
INTERVAL = 1.0


def parse_lease(value: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` as (namespace, name); ``ConfigError`` naming the value otherwise."""
    namespace, sep, name = value.partition("/")
    if not sep or not _NAME.match(namespace) or not _NAME.match(name):
        raise ConfigError(f"--prepare-leader-lease must be NAMESPACE/NAME, got {value!r}")
    return namespace, name


def check_identity(value: str) -> str:
    if not _IDENTITY.match(value):
        raise ConfigError(f"--prepare-leader-identity must be letters, digits, '.', '_' or '-', got {value!r}")
    return value


def lease_holder(api_client: Any, namespace: str, name: str) -> Callable[[], str | None]:
    """A function reading the Lease's holder through ``CoordinationV1Api`` (None: no Lease, or
    none holds it); it raises on any other failure."""
    from kubernetes.client import CoordinationV1Api
    from kubernetes.client.rest import ApiException

    api = CoordinationV1Api(api_client)

    def read() -> str | None:
        try:
            lease = api.read_namespaced_lease(name, namespace, _request_timeout=10)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        holder = lease.spec.holder_identity if lease.spec is not None else None
        return holder if isinstance(holder, str) else None
    return read


class LeaderGate:
    """``await wait()`` returns once ``read()`` names ``identity`` (see the module docstring)."""

    def __init__(self, read: Callable[[], str | None], identity: str, what: str,
                 interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self.identity = identity
        self._what = what  # "Lease NAMESPACE/NAME", for the log
        self._interval = interval
        self._clock = clock
        self._lock: asyncio.Lock | None = None
        self._read_at = -float("inf")
        self._holder: str | None = None
        self._failing = False
        self._said: tuple[bool, str | None] | None = None
        self.waiting = 0  # preparations waiting at the gate now

    async def _current(self, since: float) -> str | None:
        """The holder, read at or after ``since``: a read already begun then is shared, an older
        one is not trusted (a preparation never goes on the strength of a read from before it
        asked)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._read_at < since:
                self._read_at = self._clock()
                try:
                    self._holder = await asyncio.to_thread(self._read)
                    self._failing = False
                except Exception as e:  # noqa: BLE001 - any failed read is "not leading", logged once
                    if not self._failing:
                        log.warning("cannot read the leader Lease: preparation waits",
                                    extra={"fields": {"lease": self._what, "error": str(e)[:200]}})
                    self._failing, self._holder = True, None
            return self._holder

    def _say(self, leading: bool, holder: str | None) -> None:
        if self._said == (leading, holder):
            return
        self._said = (leading, holder)
        if leading:
            log.info("this pod leads: preparing hosts", extra={"fields": {"lease": self._what,
                                                                         "identity": self.identity}})
        else:
            log.info("preparation waits until this pod leads", extra={"fields": {
                "lease": self._what, "identity": self.identity, "holder": holder or "nobody"}})

    async def wait(self) -> None:
        self.waiting += 1
        try:
            while True:
                holder = await self._current(self._clock())
                leading = holder == self.identity
                self._say(leading, holder)
                if leading:
                    return
                await asyncio.sleep(self._interval)
        finally:
            self.waiting -= 1
