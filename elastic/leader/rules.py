"""The leader election's timing rules, as a pure core: Lease views in, decisions out, time
passed in (a monotonic clock of this process; never a timestamp read from the Lease).

The rules are client-go's (``tools/leaderelection``), written so that a test can state them:

- **Observed time, not the record's.** A candidate notes *when it saw* the Lease record change
  (holder, renewTime, resourceVersion...), by its own clock. Another holder's Lease is expired
  once the record has not changed for ``lease_duration`` seconds *as observed here*: the
  ``renewTime`` written by another machine is never compared with this machine's clock, so
  clock skew between launchers cannot make a live leader look expired (nor a dead one live).
  The duration used is the larger of ours and the one the holder wrote (bounded), so a holder
  configured with a longer lease is not cut short.
- **Acquire.** No Lease: create one. A Lease with no holder (released) or an expired one:
  update it, carrying the resourceVersion read (the API answers 409 when someone wrote in
  between: that candidate lost the race), with ``leaseTransitions`` + 1 and a new
  ``acquireTime``. Our own Lease: renew it (update, same ``acquireTime``).
- **Renew deadline.** A leader leads until ``renew_deadline`` seconds after the *start* of its
  last successful write (``won(started, ...)``). ``renew_deadline < lease_duration``, so it
  stops leading before any other candidate may take the Lease: the other waits
  ``lease_duration`` from a moment it observed *after* that write, by a clock that runs at the
  same rate (skew in offset is harmless; the rule assumes no large drift in rate, as
  client-go does). A leader that sees the Lease held by someone else stops leading at once.
- **Finished.** A leader whose job ended for good marks the Lease (``FINISHED_ANNOTATION``, the
  exit code) and releases it: a standby that saw a live leader before the mark stops instead
  of starting the job again. A candidate whose first read already shows the mark meets an
  earlier run of the job that finished: it takes the Lease (a released one) and leads.

``Election(identity, timings)``: ``observe(view, now)`` after every read; ``decide(now)`` returns
``Create``, ``Update`` (acquire or renew), ``Wait`` (someone else holds a live Lease: until when)
or ``Finished``; ``won(started, view)`` after our write succeeded (a refused write, 409, needs
no call: the next read shows who won); ``leading(now)`` and ``valid_until`` say whether and until when this
candidate may act as the leader -- the fence reads them.
``lease_view(obj)`` turns an API object (a dict, hostile until checked here) into a
``LeaseView`` or raises ``BadLease`` naming the field.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from elastic.errors import BadLease

MAX_SECONDS = 3600.0
FINISHED_ANNOTATION = "elastic-horovod.io/finished"  # the exit code of the job's last leader
_IDENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")


@dataclass(frozen=True)
class Timings:
    """How long a Lease lasts, how long a leader may fail to renew, how often candidates try.
    Checked here: ``0 < retry_period < renew_deadline < lease_duration <= MAX_SECONDS``."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        for name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= MAX_SECONDS):
                raise ValueError(f"{name} must be more than 0 and at most {MAX_SECONDS:g} seconds, got {value!r}")
        if not self.renew_deadline < self.lease_duration:
            raise ValueError(f"the renew deadline ({self.renew_deadline:g} s) must be shorter than the lease "
                             f"duration ({self.lease_duration:g} s)")
        if not self.retry_period < self.renew_deadline:
            raise ValueError(f"the retry period ({self.retry_period:g} s) must be shorter than the renew "
                             f"deadline ({self.renew_deadline:g} s)")

    @property
    def lease_seconds(self) -> int:
        """``leaseDurationSeconds`` as written (the API takes whole seconds)."""
        return math.ceil(self.lease_duration)


@dataclass(frozen=True)
class LeaseView:
    """What a Lease says, checked (``lease_view``). ``holder`` "" is nobody."""

    resource_version: str
    holder: str = ""
    duration: float | None = None
    transitions: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    finished: int | None = None  # FINISHED_ANNOTATION: the last leader's exit code


@dataclass(frozen=True)
class Create:
    """No Lease: create it, held by us."""


@dataclass(frozen=True)
class Update:
    """Write the Lease held by us, over ``resource_version``; ``acquire``: taking it over
    (``transitions`` is then the new count), else renewing it (``acquire_time`` kept)."""

    resource_version: str
    acquire: bool
    transitions: int
    acquire_time: str | None = None


@dataclass(frozen=True)
class Wait:
    """Someone else holds a live Lease: ``holder``; try again at ``until`` (our clock) at the latest."""

    holder: str
    until: float


@dataclass(frozen=True)
class Finished:
    """The job's last leader marked the Lease finished with ``exit_code``: nothing to lead."""

    holder: str
    exit_code: int


Decision = Create | Update | Wait | Finished


def check_identity(identity: str) -> str:
    """A candidate's identity as written into ``holderIdentity``; ValueError naming it."""
    if not isinstance(identity, str) or not _IDENTITY.match(identity):
        raise ValueError(f"a leader identity must be 1 to 253 letters, digits or '.', '_', ':', '-', got {identity!r}")
    return identity


def _opt_str(spec: dict, key: str, limit: int = 253) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise BadLease(f"spec.{key} is not a string of at most {limit} characters: {value!r:.80}")
    return value


def lease_view(obj: object) -> LeaseView:
    """An API Lease (its dict form) as a ``LeaseView``; ``BadLease`` naming the bad field."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise BadLease("the Lease is not an object with metadata")
    meta = obj["metadata"]
    rv = meta.get("resourceVersion")
    if not isinstance(rv, str) or not rv or len(rv) > 64:
        raise BadLease(f"metadata.resourceVersion is not a short string: {rv!r:.80}")
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise BadLease("spec is not an object")
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or isinstance(duration, bool)
                                 or not 0 < duration <= MAX_SECONDS):
        raise BadLease(f"spec.leaseDurationSeconds is not 1..{MAX_SECONDS:g}: {duration!r:.80}")
    transitions = spec.get("leaseTransitions") or 0
    if not isinstance(transitions, int) or isinstance(transitions, bool) or not 0 <= transitions < 2**31:
        raise BadLease(f"spec.leaseTransitions is not a count: {transitions!r:.80}")
    annotations = meta.get("annotations") or {}
    finished = annotations.get(FINISHED_ANNOTATION) if isinstance(annotations, dict) else None
    if finished is not None:
        if not (isinstance(finished, str) and finished.isascii() and finished.isdigit() and len(finished) <= 3):
            raise BadLease(f"annotation {FINISHED_ANNOTATION} is not an exit code: {finished!r:.80}")
    return LeaseView(resource_version=rv, holder=_opt_str(spec, "holderIdentity") or "",
                     duration=float(duration) if duration is not None else None, transitions=transitions,
                     acquire_time=_opt_str(spec, "acquireTime", 64), renew_time=_opt_str(spec, "renewTime", 64),
                     finished=int(finished) if finished is not None else None)


class Election:
    """One candidate's view of the election (module docstring). Pure: no I/O, no clock."""

    def __init__(self, identity: str, timings: Timings) -> None:
        self.identity = check_identity(identity)
        self.timings = timings
        self.view: LeaseView | None = None  # the last Lease read or written (None: there is none)
        self.seen = False  # whether anything was read yet
        self.observed_at: float | None = None  # when the view last changed, by our clock
        self.valid_until: float | None = None  # while leading: the renew deadline, by our clock
        self.lost_to: str | None = None  # who holds the Lease we led, once we saw it taken
        self.saw_leader = False  # whether a live holder other than us was ever read

    # -- observations ------------------------------------------------------------------------
    def observe(self, view: LeaseView | None, now: float) -> None:
        """A read of the Lease at ``now`` (None: there is no Lease). A change restarts the
        observed time; a Lease held by someone else ends our leadership at once."""
        if not self.seen or view != self.view:
            self.observed_at = now
        self.view, self.seen = view, True
        if view is not None and view.holder not in ("", self.identity) and view.finished is None:
            self.saw_leader = True
        if self.valid_until is not None and (view is None or view.holder != self.identity):
            self.lost_to = view.holder if view is not None and view.holder else "nobody (the Lease was released)"
            self.valid_until = None

    def won(self, started: float, view: LeaseView) -> None:
        """Our write, started at ``started``, succeeded and stored ``view``: we lead until
        ``started + renew_deadline``."""
        self.view, self.seen, self.observed_at = view, True, started
        self.valid_until = started + self.timings.renew_deadline
        self.lost_to = None

    # -- decisions ---------------------------------------------------------------------------
    def expires_at(self) -> float | None:
        """When another holder's Lease expires by our observation (None: nothing observed)."""
        if self.observed_at is None or self.view is None:
            return None
        theirs = self.view.duration or 0.0
        return self.observed_at + max(self.timings.lease_duration, min(theirs, MAX_SECONDS))

    def decide(self, now: float) -> Decision:
        """What to do at ``now`` after the last ``observe`` (module docstring)."""
        view = self.view
        if view is None:
            return Create()
        if view.finished is not None and self.saw_leader and view.holder in ("", self.identity) \
                and self.valid_until is None:
            return Finished(view.holder, view.finished)
        if view.holder == self.identity:
            return Update(view.resource_version, acquire=False, transitions=view.transitions,
                          acquire_time=view.acquire_time)
        expires = self.expires_at()
        if view.holder and expires is not None and now < expires:
            return Wait(view.holder, expires)
        return Update(view.resource_version, acquire=True, transitions=view.transitions + 1)

    def leading(self, now: float) -> bool:
        """Whether we may act as the leader at ``now``: our last write is younger than the
        renew deadline and nobody else was seen holding the Lease since."""
        return self.valid_until is not None and now < self.valid_until
