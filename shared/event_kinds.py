"""Every kind of event the elastic driver records, and what each one's detail holds: the
contract between the driver (inside horovodrun) and its readers (``elastic-run``'s watchers,
timeline and plot, the local cluster's chaos checker, the benchmarks).

``Kind`` is a ``str`` enum: ``Kind.RESET == "reset"``, and the driver writes ``Kind.X.value``.
``DETAILS[kind]`` is the ``TypedDict`` of that kind's ``detail``: the fields the driver always
writes (``tests/shared/test_event_kinds.py`` checks both lists against every ``emit`` call of
the driver Horovod is built with and of ``elastic.driver``). A reader meets a kind it does not
know (a newer driver) as the plain string (``shared.driver_events.Record.kind``): readable,
never an error.
"""
from __future__ import annotations

from enum import Enum
from typing import TypedDict


class Kind(str, Enum):
    """What happened, as the driver names it in its events file."""

    # the world
    HOSTS = "hosts"  # the driver's host set changed
    NOTIFY = "notify"  # a host change delivered to the world's coordinator
    RESET = "reset"  # new assignments in effect (a world of the new size forms)
    ABORT = "abort"  # collectives aborted because a worker is gone
    ABORT_FIRST_INIT = "abort_first_init"  # a first hvd.init aborted: a peer of it is gone
    ABORT_WITHHELD = "abort_withheld"  # not sent: its launcher no longer leads (elastic.driver.leading)
    STOP = "stop"  # the driver stops the job
    LIVENESS_REBASELINE = "liveness_rebaseline"  # the driver suspected itself: nobody lost
    ADOPTED = "adopted"  # a driver took over a running world (it started none of its workers)
    ADOPTION_FAILED = "adoption_failed"  # it could not: it starts the job again
    # one worker (a process on a host's slot)
    WORKER_START = "worker_start"  # its process is started (a joiner while the world trains)
    WORKER_REGISTERED = "worker_registered"  # its notification service is up
    WORKER_READY = "worker_ready"  # it asked for its rank (hvd.init, a rendezvous)
    WORKER_READY_IGNORED = "worker_ready_ignored"  # a rank request not taken (a stale world)
    PROGRESS = "progress"  # its commit count
    WORKER_LEAVING = "worker_leaving"  # it announced a graceful leave (SIGTERM)
    WORKER_LOST = "worker_lost"  # the driver gave it up (silent, host gone, no registration)
    WORKER_EXIT = "worker_exit"  # its process ended
    BARRIER_BUSY = "barrier_busy"  # kept past the barrier deadline: it still works
    # a joiner: started while the world trains, taken in by the next reset
    JOINER_READY = "joiner_ready"  # it waits in hvd.init
    JOINER_ALONE = "joiner_alone"  # ready while a sibling on its host still starts
    JOINER_TAKEN = "joiner_taken"  # a reset took it in
    JOINER_DROPPED = "joiner_dropped"  # it died, hung or lost its host first
    # a host
    QUARANTINE = "quarantine"  # a silent worker's host gets no new worker for a cooldown
    QUARANTINE_ENDED = "quarantine_ended"  # its cooldown is over: it serves again
    REFUSAL_ENDED = "refusal_ended"  # a host refused after a failed joiner serves again
    REMOVAL_HELD = "removal_held"  # a host left discovery: its removal waits the leave grace
    REMOVAL_DROPPED = "removal_dropped"  # it came back within the grace: nothing changes
    REMOVAL_RELEASED = "removal_released"  # the grace is over (or the workers ended): removed

    def __str__(self) -> str:
        return self.value

    def __hash__(self) -> int:
        """The string's hash (Enum's is the name's), so ``"reset"`` and ``Kind.RESET``, which
        are equal, find each other in a set or a dict."""
        return hash(self.value)


def kind_of(text: str) -> Kind | str:
    """The ``Kind`` named ``text``, or ``text`` itself when this version does not know it."""
    try:
        return Kind(text)
    except ValueError:
        return text


class Hosts(TypedDict):
    hosts: list[str]  # host:slots, sorted
    update: str  # the HostUpdateResult's name: added, removed, mixed


class Notify(TypedDict):
    timestamp: float  # the host change's time, as the coordinator gets it
    to: str  # host[slot] of the coordinator


class Reset(TypedDict):
    world_size: int
    rendezvous: int  # the world's number, counted from 1
    hosts: list[str]  # host:slots in effect
    new_workers: int  # processes started for this world


class Abort(TypedDict):
    reason: str
    workers: int  # how many workers were told


class AbortWithheld(TypedDict):
    reason: str  # why the abort would have been sent


class Stop(TypedDict):
    error: str | None


class LivenessRebaseline(TypedDict):
    reason: str
    silent: int
    world: int


class Adopted(TypedDict):
    world_size: int
    hosts: list[str]  # host:slots of the world taken over, in rank order
    commits: int | None  # the highest commit count a worker of it answered (None between two worlds)
    between_worlds: bool  # its workers were between two worlds (a peer lost while nobody led)
    waited: float  # seconds from the driver's start to the decision


class AdoptionFailed(TypedDict):
    reason: str  # what was missing from the world at the deadline
    waited: float


class WorkerStart(TypedDict):
    host: str
    slot: int
    rank: int | None  # None for a joiner: its rank comes at the next reset
    joiner: bool


class Slot(TypedDict):
    """The detail of a kind that names only the worker: its host and slot."""

    host: str
    slot: int


class SlotReason(TypedDict):
    host: str
    slot: int
    reason: str


class Progress(TypedDict):
    host: str
    slot: int
    commits: int


class WorkerExit(TypedDict):
    host: str
    slot: int
    exit_code: int | None


class BarrierBusy(TypedDict):
    host: str
    slot: int
    cpu: float | None  # CPU seconds the main thread (and declared work) used since the check
    io: bool  # whether it read or wrote


class JoinerReady(TypedDict):
    host: str
    slot: int
    startup: float  # seconds from its start to hvd.init


class JoinerAlone(TypedDict):
    host: str
    slot: int
    starting: int  # siblings on its host still starting


class JoinerTaken(TypedDict):
    host: str
    slot: int
    rank: int
    rendezvous: int
    waited: float | None  # seconds at the rendezvous; None: still starting when taken


class Quarantine(TypedDict):
    host: str
    reason: str
    cooldown: float  # seconds without a new worker there
    count: int  # quarantines of this host in a row


class HostAfter(TypedDict):
    host: str
    after: float | None  # seconds since it began (None: not known)


class RemovalHeld(TypedDict):
    host: str
    grace: float  # seconds its removal waits


class HostReason(TypedDict):
    host: str
    reason: str


DETAILS: dict[Kind, type] = {
    Kind.HOSTS: Hosts,
    Kind.NOTIFY: Notify,
    Kind.RESET: Reset,
    Kind.ABORT: Abort,
    Kind.ABORT_FIRST_INIT: Abort,
    Kind.ABORT_WITHHELD: AbortWithheld,
    Kind.STOP: Stop,
    Kind.LIVENESS_REBASELINE: LivenessRebaseline,
    Kind.ADOPTED: Adopted,
    Kind.ADOPTION_FAILED: AdoptionFailed,
    Kind.WORKER_START: WorkerStart,
    Kind.WORKER_REGISTERED: Slot,
    Kind.WORKER_READY: Slot,
    Kind.WORKER_READY_IGNORED: SlotReason,
    Kind.PROGRESS: Progress,
    Kind.WORKER_LEAVING: Slot,
    Kind.WORKER_LOST: SlotReason,
    Kind.WORKER_EXIT: WorkerExit,
    Kind.BARRIER_BUSY: BarrierBusy,
    Kind.JOINER_READY: JoinerReady,
    Kind.JOINER_ALONE: JoinerAlone,
    Kind.JOINER_TAKEN: JoinerTaken,
    Kind.JOINER_DROPPED: SlotReason,
    Kind.QUARANTINE: Quarantine,
    Kind.QUARANTINE_ENDED: HostAfter,
    Kind.REFUSAL_ENDED: HostAfter,
    Kind.REMOVAL_HELD: RemovalHeld,
    Kind.REMOVAL_DROPPED: HostAfter,
    Kind.REMOVAL_RELEASED: HostReason,
}
