"""The driver's answer to the lease wrappers' questions (``shared.lease_wire``), installed into
Horovod's rendezvous HTTP server by ``install``: 200 to the wrappers of this run, ``OTHER_RUN``
to any other, on a kept connection (HTTP/1.1 keep-alive, idle for at most ``IDLE_SECONDS``).

A wrapper waiting to be adopted (``shared.lease_wire.adopt_path``) gets 200 only for a process
this driver adopted (``Answers.adopt``), ``OTHER_RUN`` otherwise, whatever the run: the driver
that started it counts it as exited once its session is gone, so it must never hold it. The
claims refused are kept (``Answers.waiting``): they name the processes an adopting leader can
take over. An adopted wrapper whose training ended says so (``shared.lease_wire.exit_path``):
the exit is kept once (``Answers.take_exits``), for the driver that has no ssh session to
see it, and the process is no longer adopted.

A kept connection costs the driver no handshake and no new handler thread per renewal, and
through a driver stall a renewal waits in that connection's socket, not in the listen backlog.
Every other request is Horovod's, unchanged.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from shared.lease_wire import ADOPT, EXIT, NO_RUN_ID, OTHER_RUN, SCOPE

IDLE_SECONDS = 30.0  # a kept connection nobody asks on (a vanished worker) is closed after this
PREFIX = f"/{SCOPE}/"
MAX_WAITING = 4096  # claims kept (a wrapper asks with one; more would be somebody's flood)
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,253}$")


@dataclass(frozen=True)
class Claim:
    """A wrapper waiting to be adopted: its run (``NO_RUN_ID`` without one), host, local rank
    and the wrapper's pid (as its own host sees it)."""
    run_id: str
    host: str
    slot: int
    pid: int

    @classmethod
    def parse(cls, asked: str) -> Claim | None:
        """The claim in ``asked`` (the path after ``PREFIX``), None when it is not a well-formed
        one (anything from the network is checked before it is kept)."""
        parts = asked.split("/")
        if len(parts) != 5 or parts[1] != ADOPT or not parts[3].isdigit() or not parts[4].isdigit():
            return None
        run_id, _, host, slot, pid = parts
        if not _NAME.match(run_id) or not _NAME.match(host) or host in (".", "..") or len(slot) > 6 \
                or len(pid) > 10:
            return None
        return cls(run_id, host, int(slot), int(pid))

    @classmethod
    def parse_exit(cls, asked: str) -> tuple[Claim, int] | None:
        """The claim and exit code in an exit report (the path after ``PREFIX``), None when it
        is not a well-formed one."""
        head, sep, code = asked.rpartition(f"/{EXIT}/")
        claim = cls.parse(head) if sep else None
        if claim is None or not code.isdigit() or len(code) > 3 or int(code) > 255:
            return None
        return claim, int(code)


class Answers:
    """What this driver answers: its run id (None: every run's plain question is its own), the
    processes it adopted, and the claims of those still waiting (thread-safe)."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self._adopted: set[Claim] = set()
        self._waiting: dict[Claim, float] = {}
        self._exited: dict[Claim, int] = {}  # adopted processes whose wrapper reported an exit
        self._untaken: list[tuple[Claim, int]] = []
        self._lock = threading.Lock()

    def adopt(self, claim: Claim) -> None:
        """From now on ``claim``'s wrapper is this driver's: its questions are answered 200."""
        with self._lock:
            self._adopted.add(claim)
            self._waiting.pop(claim, None)

    def release(self, claim: Claim) -> None:
        """No longer this driver's: its next question is refused (it ends at its window)."""
        with self._lock:
            self._adopted.discard(claim)

    def waiting(self) -> dict[Claim, float]:
        """The claims refused so far and when each was last asked (``time.monotonic``): the
        wrappers whose launcher is gone, as they name themselves."""
        with self._lock:
            return dict(self._waiting)

    def take_exits(self) -> list[tuple[Claim, int]]:
        """The exits adopted wrappers reported since the last call (claim, exit code), each once."""
        with self._lock:
            taken, self._untaken = self._untaken, []
            return taken

    def _report_exit(self, claim: Claim, code: int) -> int:
        with self._lock:
            if claim in self._adopted:
                self._adopted.discard(claim)
                self._exited[claim] = code
                self._untaken.append((claim, code))
                return 200
            return 200 if self._exited.get(claim) == code else OTHER_RUN  # a report told again

    def status(self, asked: str) -> int:
        """The status for the question ``asked`` (the path after ``PREFIX``)."""
        if f"/{EXIT}/" in asked:
            report = Claim.parse_exit(asked)
            return OTHER_RUN if report is None else self._report_exit(*report)
        if f"/{ADOPT}/" in asked:
            claim = Claim.parse(asked)
            with self._lock:
                if claim is not None and claim in self._adopted:
                    return 200
                if claim is not None and (claim in self._waiting or len(self._waiting) < MAX_WAITING):
                    self._waiting[claim] = time.monotonic()
            return OTHER_RUN
        return 200 if not self.run_id or asked in (self.run_id, NO_RUN_ID) else OTHER_RUN


_installed: Answers | None = None


def answer(handler: Any, answers: Answers) -> None:
    """Answer the lease question in handler.path and keep the connection open."""
    handler.protocol_version = "HTTP/1.1"
    handler.send_response(answers.status(handler.path[len(PREFIX):]))
    handler.send_header("Content-Length", "0")
    handler.end_headers()
    handler.close_connection = False
    handler.connection.settimeout(IDLE_SECONDS)


def installed() -> Answers:
    """The ``Answers`` ``install`` made (RuntimeError before it: nothing answers the lease)."""
    if _installed is None:
        raise RuntimeError("the lease answers are not installed")
    return _installed


def install(run_id: str | None) -> Answers:
    """Make Horovod's rendezvous handler (and the elastic one built on it) answer the lease of
    run ``run_id``; the ``Answers`` it uses (the one already installed, its run id replaced)."""
    global _installed
    from horovod.runner.http.http_server import RendezvousHandler
    original = RendezvousHandler.do_GET
    if _installed is not None and getattr(original, "answers_lease", False):
        _installed.run_id = run_id
        return _installed
    answers = _installed = Answers(run_id)

    def do_GET(self: Any) -> None:
        if self.path.startswith(PREFIX):
            answer(self, answers)
        else:
            original(self)
    do_GET.answers_lease = True  # type: ignore[attr-defined]
    RendezvousHandler.do_GET = do_GET
    return answers
