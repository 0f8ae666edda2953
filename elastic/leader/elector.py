"""The leader election's I/O shell: one ``coordination.k8s.io/v1`` Lease read and written through
the official client's ``CoordinationV1Api``, the decisions taken by the pure core
(``elastic.leader.rules.Election``).

Why our own elector and not ``kubernetes.leaderelection``: the client's module measures the
renew deadline and the observed time with the wall clock (``time.time()``), so a clock step
moves both; it says a leader lost only after its renew loop gives up, through a callback,
so a leader that was paused past its Lease (SIGSTOP, a VM pause) acts on wake-up before
anybody tells it; its ``run()`` blocks for good with no way to stop a standby; and its timing
rules live inside the loop that does the I/O, so a test of them needs real sleeps. Here the
rules are a pure core with the clock passed in (``time.monotonic``: it keeps counting while the
process is stopped), and ``valid_until`` -- the end of leadership, known *before* any I/O --
is what the fence (``elastic.launch.fencing``) reads.

``LeaseElector(api, namespace, name, identity, timings)``; nothing runs in the constructor.
``connect(settings)`` makes the ``api`` from an ``ElectionSettings``.

- ``attempt() -> Decision``: one round -- read the Lease (404: none), let the core decide,
  write if it says so (create; replace carrying the resourceVersion read). A 409 (someone wrote
  first) or any API failure is logged and ends the round; the next read tells who won. Does
  not block beyond one request (``request_timeout``).
- ``campaign(stop, on_standby) -> Finished | None``: rounds every ``retry_period`` until this
  candidate leads (None) or the Lease says the job finished (``Finished``); ``on_standby(holder)``
  is called each time the holder it waits for changes. Returns ``None`` too, without leading,
  when ``stop`` is set (check ``leading()``). Blocks.
- ``renew(stop)``: while leading, a round every ``retry_period``; returns when leadership is
  lost (the renew deadline passed, or someone else holds the Lease) or ``stop`` is set. Blocks.
- ``leading()``, ``valid_until`` and ``lost_reason()`` for the fence; ``took_over_from``: the
  holder whose expired Lease this candidate acquired (None: it was free).
- ``finish(exit_code)``: while still leading, mark the Lease finished and release it (holder
  "", ``FINISHED_ANNOTATION``); ``release()``: release it without the mark, so a standby
  takes over at once. Both best effort (logged), one request each.

Every object read is checked by ``rules.lease_view``; a Lease that fails the check counts as
held by an unknown holder (the candidate waits a whole lease duration before writing over
it).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from elastic.errors import BadLease, ConfigError
from elastic.leader.rules import (
    FINISHED_ANNOTATION,
    Create,
    Decision,
    Election,
    Finished,
    LeaseView,
    Timings,
    Update,
    Wait,
    lease_view,
)

log = logging.getLogger("elastic.leader")
UNKNOWN_HOLDER = "an unreadable holder"


@dataclass(frozen=True)
class ElectionSettings:
    """Which Lease (``namespace``/``name``), who this candidate is, and the timings."""

    namespace: str
    name: str
    identity: str
    timings: Timings
    kubeconfig: str | None = None  # None: in the cluster, else the default kubeconfig


def connect(settings: ElectionSettings):
    """A ``CoordinationV1Api`` from ``settings.kubeconfig``, else the in-cluster configuration,
    else the default kubeconfig; ``ConfigError`` naming what is missing."""
    import kubernetes
    try:
        if settings.kubeconfig is not None:
            api_client = kubernetes.config.new_client_from_config(config_file=settings.kubeconfig)
        else:
            try:
                kubernetes.config.load_incluster_config()
                api_client = kubernetes.client.ApiClient()
            except kubernetes.config.ConfigException:
                api_client = kubernetes.config.new_client_from_config()
    except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
        raise ConfigError(f"--leader-election: no usable Kubernetes configuration: {_short(exc)}") from None
    return kubernetes.client.CoordinationV1Api(api_client)


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wall() -> datetime:
    return datetime.now(timezone.utc)


class LeaseElector:
    """One candidate's election on one Lease (module docstring)."""

    def __init__(self, api, namespace: str, name: str, identity: str, timings: Timings, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], datetime] = _wall,
                 request_timeout: float | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.core = Election(identity, timings)
        self.timings = timings
        self.clock = clock
        self.wall = wall
        self.request_timeout = request_timeout or max(1.0, timings.retry_period)
        self.took_over_from: str | None = None  # the holder whose expired Lease we acquired

    @property
    def identity(self) -> str:
        return self.core.identity

    @property
    def valid_until(self) -> float | None:
        return self.core.valid_until

    def leading(self) -> bool:
        return self.core.leading(self.clock())

    def lost_reason(self) -> str:
        """Why this candidate no longer leads, in words (for the fence's one line)."""
        if self.core.lost_to is not None:
            return f"the Lease {self.namespace}/{self.name} is held by {self.core.lost_to}"
        return (f"the Lease {self.namespace}/{self.name} was not renewed within the renew deadline "
                f"({self.timings.renew_deadline:g} s)")

    # -- the API, hostile answers checked ---------------------------------------------------
    def _call(self, method: str, *args, **kwargs) -> object:
        """One API call; its JSON body (a dict), or raises ``ApiException`` / ``OSError``-likes."""
        response = getattr(self.api, method)(*args, _preload_content=False,
                                             _request_timeout=self.request_timeout, **kwargs)
        return json.loads(response.data or b"null")

    def _read(self) -> LeaseView | None:
        from kubernetes.client.rest import ApiException
        try:
            obj = self._call("read_namespaced_lease", self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        try:
            return lease_view(obj)
        except BadLease as exc:
            log.warning("the Lease %s/%s is not one we can read (%s): treated as held by someone else",
                        self.namespace, self.name, exc)
            rv = obj.get("metadata", {}).get("resourceVersion") if isinstance(obj, dict) else None
            return LeaseView(resource_version=rv if isinstance(rv, str) and len(rv) <= 64 else "?",
                             holder=UNKNOWN_HOLDER)

    def _body(self, decision: Create | Update, now: str, annotations: dict | None = None) -> dict:
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.timings.lease_seconds,
                "renewTime": now, "acquireTime": now, "leaseTransitions": 0}
        meta: dict = {"name": self.name, "namespace": self.namespace}
        if isinstance(decision, Update):
            meta["resourceVersion"] = decision.resource_version
            spec["leaseTransitions"] = decision.transitions
            if not decision.acquire and decision.acquire_time:
                spec["acquireTime"] = decision.acquire_time
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def _write(self, decision: Create | Update) -> None:
        started, before = self.clock(), self.core.view
        body = self._body(decision, micro_time(self.wall()))
        if isinstance(decision, Create):
            obj = self._call("create_namespaced_lease", self.namespace, body)
        else:
            obj = self._call("replace_namespaced_lease", self.name, self.namespace, body)
        self.core.won(started, lease_view(obj))
        if isinstance(decision, Update) and decision.acquire and before is not None \
                and before.holder not in ("", self.identity):
            self.took_over_from = before.holder

    # -- rounds ------------------------------------------------------------------------------
    def attempt(self) -> Decision | None:
        """One round (module docstring); the core's decision, or None when the read failed."""
        from kubernetes.client.rest import ApiException
        try:
            view = self._read()
        except (ApiException, OSError, ValueError) as exc:  # urllib3's errors are OSErrors
            log.info("could not read the Lease %s/%s: %s", self.namespace, self.name, _short(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - urllib3 raises its own (MaxRetryError...)
            log.info("could not read the Lease %s/%s: %s", self.namespace, self.name, _short(exc))
            return None
        self.core.observe(view, self.clock())
        decision = self.core.decide(self.clock())
        if isinstance(decision, (Create, Update)):
            try:
                self._write(decision)
            except ApiException as exc:
                if exc.status == 409:
                    log.debug("the Lease %s/%s changed under us (409)", self.namespace, self.name)
                else:
                    log.info("could not write the Lease %s/%s: %s", self.namespace, self.name, _short(exc))
            except Exception as exc:  # noqa: BLE001 - a failed write is a round lost, never a crash
                log.info("could not write the Lease %s/%s: %s", self.namespace, self.name, _short(exc))
        return decision

    def campaign(self, stop: threading.Event, on_standby: Callable[[str], None]) -> Finished | None:
        """Rounds until leading, finished or stopped (module docstring). Blocks."""
        holder = None
        while not stop.is_set():
            decision = self.attempt()
            if self.leading():
                return None
            if isinstance(decision, Finished):
                return decision
            if isinstance(decision, Wait) and decision.holder != holder:
                holder = decision.holder
                on_standby(holder)
            stop.wait(self.timings.retry_period)
        return None

    def renew(self, stop: threading.Event) -> None:
        """While leading, a round every ``retry_period``; returns once leadership is lost or
        ``stop`` is set. Blocks."""
        while not stop.is_set() and self.leading():
            until = self.valid_until
            wait = self.timings.retry_period
            if until is not None:
                wait = min(wait, max(0.0, until - self.clock()))
            if stop.wait(wait):
                return
            if self.leading():
                self.attempt()

    def _hand_back(self, annotations: dict | None, what: str) -> None:
        from kubernetes.client.rest import ApiException
        view = self.core.view
        if not self.leading() or view is None:
            return
        body = self._body(Update(view.resource_version, acquire=False, transitions=view.transitions,
                                 acquire_time=view.acquire_time), micro_time(self.wall()), annotations)
        body["spec"]["holderIdentity"] = ""
        body["spec"]["leaseDurationSeconds"] = 1
        try:
            self._call("replace_namespaced_lease", self.name, self.namespace, body)
        except (ApiException, Exception) as exc:  # noqa: BLE001 - best effort: the Lease expires anyway
            log.info("could not %s the Lease %s/%s: %s", what, self.namespace, self.name, _short(exc))
            return
        self.core.valid_until = None

    def finish(self, exit_code: int) -> None:
        """Mark the Lease finished with ``exit_code`` and release it (best effort)."""
        self._hand_back({FINISHED_ANNOTATION: str(exit_code)}, "mark finished")

    def release(self) -> None:
        """Release the Lease for a standby to take at once (best effort)."""
        self._hand_back(None, "release")


def _short(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status:
        return f"HTTP {status} {reason or ''}".strip()
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
