"""A worker's processes end when the launcher that started them is gone: the lease wrapper.

    python -m elastic.worker.lease [--seconds N] [--adopt-window W] -- COMMAND ARGS...

``elastic-run`` puts this in front of the training command (``--lease``, default
``DEFAULT_LEASE`` s; 0 leaves it out), so it runs on every worker host as the first process of
the job there, from the moment the host's shell starts it (before the training imports
anything). It starts COMMAND as its child, in its own process group (the group of the shell
the worker's ssh session runs), forwards every SIGTERM/SIGINT/SIGHUP it gets to the child (one
signal each: the reap's and elastic-run's SIGTERM reach the trainer once), and exits with the
child's code (128+N when the child died of signal N). Meanwhile it watches, every ``TICK`` s:

- the lease: while ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT`` (Horovod sets them for every
  elastic worker: the driver's HTTP server in horovodrun) are set, a thread asks that server
  about this run (``shared.lease_wire``: the run id of ``ELASTIC_RUN_ID``) every ``POLL`` s, one
  question at a time on one kept connection, each allowed the whole lease to be answered; the
  lease is renewed *when an answer arrives* that is not "another run" (410): the driver was
  running then (plain horovodrun answers 404 without a log line). A driver that stalls (a GIL
  hold, a throttled pod) keeps the question in the connection's socket (or its listen backlog,
  for a new connection) and answers it the moment it runs again, so a stall of S seconds looks like
  at most S + ``POLL`` s of silence (plus the driver's catch-up). No answer for N seconds (a
  launcher killed, a node gone with no FIN: the connections stay half-open, a launcher
  frozen) and the lease is lost. N (``DEFAULT_LEASE``, 8 s) covers the 6 s stalls the driver
  tolerates of itself plus ``POLL`` plus 1 s of catch-up, and ends a silent launcher's world
  within N + ``TICK`` s (< 10 s). Time this wrapper itself did not run (its pod frozen, its
  node starved) is not counted against the driver (``Judge``): it first gives the driver
  ``POLL`` s to answer the question it had pending;
- the session: the process that started this one has gone (the parent changed), or nobody
  reads this process's stdout or stderr any more (a pipe or socket whose other end closed:
  sshd ended the session, its client-alive check included, or horovodrun's output relay is
  gone). This covers the time before the training registers with the driver and any worker
  whose driver is unreachable from the start.

On a loss it writes one line to stderr (if anyone still reads it) and sends SIGKILL to its
process group (itself, the shell that started it, the training and everything it started):
the old world is gone within N + ``TICK`` seconds of its launcher's last answer, or within the
session's end, whichever comes first.

With an adoption window (``--adopt-window W``, W > 0) a loss does not end the worker at once
(``elastic.worker.custody``): the training's stdout and stderr are pipes this wrapper copies
to its own (``elastic.worker.output``), so when the session is gone the training trains on, its
output going to a log on the host (the line naming it is the last the session gets), and the
wrapper asks at the same address whether a leader adopted it (``shared.lease_wire.adopt_path``:
its run, ``HOROVOD_HOSTNAME``, ``HOROVOD_LOCAL_RANK`` and this wrapper's pid). Only a driver
that took over this very process answers yes; the one that started it never does. Adopted, it
is held by the adopting leader's lease alone, and when its training ends the wrapper tells
that leader the exit code (``shared.lease_wire.exit_path``, retried for up to N seconds: no
ssh session carries it there); not adopted within W seconds, it is ended as above, so nothing
outlives a job without a launcher by more than W + N seconds. With a window, a SIGTERM that
comes after the process that started the wrapper is gone (horovodrun's death signal: it ties a
worker it runs without ssh to itself with ``PR_SET_PDEATHSIG``) is that loss, not a request to
leave: it is not forwarded to the training. The training gets the window as
``HOROVOD_ELASTIC_DRIVER_WAIT`` (unless set): a reset it begins while no launcher leads (a
peer lost in the gap) waits that long for the driver that adopts it (fork patch 0112).

``decide`` and ``Judge`` are the pure rule; ``main`` the I/O around it.
Standard library only (it runs before anything else on the worker).
"""
from __future__ import annotations

import http.client
import math
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from elastic.environment import HOROVOD_ELASTIC_DRIVER_WAIT, HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT
from elastic.worker.custody import ADOPTED, ATTACHED, ORPHAN, Custody
from elastic.worker.output import Output, pipes
from shared.environment import HOROVOD_HOSTNAME, HOROVOD_LOCAL_RANK
from shared.exitcodes import EXIT_CANNOT_RUN, EXIT_USAGE, exit_for_returncode
from shared.lease_wire import OTHER_RUN, RUN_ID_ENV, adopt_path, exit_path, lease_path
from shared.worker import Worker

DEFAULT_LEASE = 8.0  # the driver's own 6 s stall + POLL + 1 s catch-up; a silent launcher: < 10 s
MIN_LEASE = 5.0
MAX_LEASE = 3600.0
_RUN_ID = re.compile(r"^[A-Za-z0-9-]{1,128}$")
POLL = 1.0  # seconds between two questions to the driver (each may take the whole lease)
TICK = 0.25
LATE = 2.0  # a check this much later than TICK: this wrapper itself did not run meanwhile
ADDR_ENV = HOROVOD_GLOO_RENDEZVOUS_ADDR
PORT_ENV = HOROVOD_GLOO_RENDEZVOUS_PORT
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# how long a SIGTERM waits to tell the launcher's death signal from a request (parent_gone)
PARENT_GONE_SECS = 0.5


def check_seconds(value: float) -> float:
    """A lease length: 0 (off) or ``MIN_LEASE``..``MAX_LEASE`` seconds; ValueError naming the
    value otherwise. Below ``MIN_LEASE`` a stalled driver (seconds, on a loaded node) would end
    healthy workers."""
    if not math.isfinite(value) or (value != 0 and not MIN_LEASE <= value <= MAX_LEASE):
        raise ValueError(f"the lease must be 0 (off) or {MIN_LEASE:g}..{MAX_LEASE:g} seconds, got {value!r}")
    return value


def check_window(value: float) -> float:
    """An adoption window: 0 (none) or ``MIN_LEASE``..``MAX_LEASE`` seconds; ValueError naming
    the value otherwise."""
    if not math.isfinite(value) or (value != 0 and not MIN_LEASE <= value <= MAX_LEASE):
        raise ValueError(f"the adoption window must be 0 (none) or {MIN_LEASE:g}..{MAX_LEASE:g} seconds, "
                         f"got {value!r}")
    return value


def decide(now: float, renewed: float | None, seconds: float, parent_changed: bool,
           output_gone: bool) -> str | None:
    """Why this worker must end now, or None. ``renewed``: when the driver last answered
    (monotonic; None: no driver to ask); ``seconds``: the lease (0: off). Pure."""
    if parent_changed:
        return "the process that started this worker is gone"
    if output_gone:
        return "nobody reads this worker's output (its ssh session or launcher is gone)"
    if seconds > 0 and renewed is not None and now - renewed > seconds:
        return f"no answer from the driver for {now - renewed:.1f} s (lease {seconds:g} s)"
    return None


def hung_up(fds: Sequence[int]) -> bool:
    """Whether any of ``fds`` is a pipe or socket whose reader is gone (POLLERR/POLLHUP)."""
    poller = select.poll()
    watched = False
    for fd in fds:
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            poller.register(fd, 0)  # only the error conditions, always reported
            watched = True
    if not watched:
        return False
    return any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, ev in poller.poll(0))


class Judge:
    """The lease's clock, with this wrapper's own pauses left out. ``renewed(now, answered)``
    is the renewal time to hand to ``decide``: the driver's last answer (``answered``), moved
    forward by the time this wrapper itself did not run since (a check ``LATE`` s later than
    ``TICK``: its pod frozen or its node starved, when the driver could not have been heard),
    and then ``POLL`` s more, for the answer the driver owes to the question pending while the
    wrapper was paused. Pure (the clock is passed in)."""

    def __init__(self, now: float):
        self._last_check = now
        self._answered = -math.inf
        self._credit = 0.0

    def renewed(self, now: float, answered: float) -> float:
        if answered != self._answered:  # a new answer: earlier pauses no longer matter
            self._answered, self._credit = answered, 0.0
        late = now - self._last_check - TICK
        if late > LATE:
            self._credit += late + POLL
        self._last_check = now
        return answered + self._credit


class Renewer:
    """Asks the driver's HTTP server at ``addr:port`` about run ``run_id`` every ``POLL`` s in a
    daemon thread, one question at a time on a kept connection, each allowed ``deadline`` s;
    ``renewed`` is when an answer that is not "another run" last arrived, starting at
    ``start()``."""

    def __init__(self, addr: str, port: int, deadline: float = DEFAULT_LEASE, run_id: str | None = None):
        self._addr = addr
        self._port = port
        self._deadline = deadline
        self._path = lease_path(run_id)
        self._conn: http.client.HTTPConnection | None = None
        self.renewed = time.monotonic()
        self.adopted_at: float | None = None  # when a leader last said it adopted this worker
        self._claiming = False
        self._worker = Worker(self._run, "lease")

    @property
    def claiming(self) -> bool:
        return self._claiming

    def claim(self, path: str) -> None:
        """Ask ``path`` (``shared.lease_wire.adopt_path``) from now on: only a 200 renews."""
        self._path, self._claiming = path, True

    def start(self) -> Renewer:
        self._worker.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop asking (after the question in flight, at most ``deadline`` s); True once ended."""
        return self._worker.stop(timeout)

    def _request(self, path: str) -> int | None:
        """One GET of ``path`` on the kept connection (or a new one when it is gone): its
        status, None when no answer came."""
        for attempt in range(2):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._addr, self._port, timeout=self._deadline)
            conn = self._conn
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                self._close()
                if fresh or attempt:
                    return None
                continue  # the kept connection was closed by the driver: once more on a new one
            if response.will_close:
                self._close()
            return response.status
        return None

    def ask(self) -> bool:
        """One question (on the kept connection, or a new one when it is gone); True when the
        driver of this run answered (``shared.lease_wire``): the lease is renewed."""
        status = self._request(self._path)
        if status is None or status == OTHER_RUN or (self._claiming and status != 200):
            return False  # no answer, another run's driver at this address, or nobody adopted it
        now = time.monotonic()
        self.renewed = max(self.renewed, now)  # the driver ran when it answered
        if self._claiming:
            self.adopted_at = now
        return True

    def report_exit(self, code: int, within: float) -> bool:
        """Tell the driver that adopted this worker that its training exited ``code``
        (``shared.lease_wire.exit_path``), asking every ``POLL`` s for up to ``within`` s; True
        once it answered that it took it. Only after ``stop`` (one connection, one asker)."""
        path = exit_path(self._path, code)
        end = time.monotonic() + within
        while True:
            status = self._request(path)
            if status is not None:
                return status == 200  # anything else: it holds this worker no more
            if time.monotonic() + POLL > end:
                return False
            time.sleep(POLL)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self) -> None:
        try:
            while True:
                started = time.monotonic()
                self.ask()
                if self._worker.stopping.wait(max(0.0, POLL - (time.monotonic() - started))):
                    return
        finally:
            self._close()


def renewer_from_env(environ: dict[str, str] | os._Environ[str],
                     deadline: float = DEFAULT_LEASE) -> Renewer | None:
    """The driver to ask, from Horovod's variables; None when they are absent or bad."""
    addr, port = environ.get(ADDR_ENV, ""), environ.get(PORT_ENV, "")
    if not addr or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    run_id = environ.get(RUN_ID_ENV) or None
    if run_id is not None and not _RUN_ID.match(run_id):
        run_id = None  # not a run id elastic-run makes: ask as a wrapper without one
    return Renewer(addr, int(port), deadline, run_id)


def _say(line: str) -> None:
    try:
        os.write(2, f"elastic-run lease: {line}\n".encode())
    except OSError:
        pass


def _exit_code(returncode: int) -> int:
    return exit_for_returncode(returncode)


def parent_gone(parent: int, within: float = PARENT_GONE_SECS) -> bool:
    """Whether the process ``parent`` stopped being this one's parent, waiting up to ``within``
    seconds for it: the death signal comes as the first of the parent's threads ends (the one
    that started this process), while its other threads, still this process's parent, die."""
    deadline = time.monotonic() + within
    while os.getppid() == parent:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _identity(environ: dict[str, str] | os._Environ[str]) -> tuple[str, int]:
    """(host, local rank) as horovodrun named this worker; this host's name without them."""
    slot = environ.get(HOROVOD_LOCAL_RANK, "0")
    return environ.get(HOROVOD_HOSTNAME) or socket.gethostname(), int(slot) if slot.isdigit() else 0


def run(command: Sequence[str], seconds: float, window: float = 0.0) -> int:
    """Run ``command`` under the watch described in the module docstring; its exit code.
    Never returns when the watch ends the process group."""
    parent = os.getppid()
    output: Output | None = None
    claim: str | None = None
    if window > 0:
        streams, (out_w, err_w) = pipes()
        host, slot = _identity(os.environ)
        try:
            claim = adopt_path(os.environ.get(RUN_ID_ENV) or None, host, slot, os.getpid())
        except ValueError:
            claim = None  # a host name no leader could name back: never adopted, ended at the window
        log = os.path.join(tempfile.gettempdir(), f"elastic-run-worker-{slot}-{os.getpid()}.log")
        output = Output(streams, log)
        try:
            # a reset begun while no launcher leads waits for the one that adopts it (fork
            # patch 0112), for as long as this wrapper keeps it for an adoption
            env = dict(os.environ)
            env.setdefault(HOROVOD_ELASTIC_DRIVER_WAIT, f"{window:g}")
            child = subprocess.Popen(list(command), stdout=out_w, stderr=err_w, env=env)
        finally:
            os.close(out_w)
            os.close(err_w)
        output.start()
    else:
        child = subprocess.Popen(list(command))
    sent: set[int] = set()
    custody = Custody(window)

    def forward(signum, _frame) -> None:
        if window > 0 and signum == signal.SIGTERM and custody.state != ADOPTED and parent_gone(parent):
            # the launcher's death, not a request to leave: horovodrun ties a worker it runs
            # without ssh to itself (PR_SET_PDEATHSIG, SIGTERM). The session is lost: the
            # training trains on and waits to be adopted
            return
        if signum not in sent:  # one each: a signal the child got twice would mean "now"
            sent.add(signum)
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass
    for sig in FORWARDED:
        signal.signal(sig, forward)
    renewer = renewer_from_env(os.environ, seconds) if seconds > 0 else None
    if renewer is not None:
        renewer.start()
    judge = Judge(time.monotonic())

    def say(line: str) -> None:
        """To the session while it is there, and to the log once the output goes there."""
        if output is None or not output.detached:
            _say(line)
        if output is not None and output.detached:
            output.note(f"elastic-run lease: {line}\n".encode())
    while True:
        try:
            code = _exit_code(child.wait(timeout=TICK))
        except subprocess.TimeoutExpired:
            pass
        else:
            if custody.state == ADOPTED and renewer is not None:  # no session tells its leader
                renewer.stop()
                told = renewer.report_exit(code, seconds)
                say(f"the training exited {code}: " + ("its leader was told" if told else "its leader was not told"))
            if output is not None:
                output.close()
            return code
        now = time.monotonic()
        renewed = judge.renewed(now, renewer.renewed) if renewer else None
        if custody.state == ATTACHED:
            why = decide(now, renewed, seconds, os.getppid() != parent, hung_up((1, 2)) or
                         (output is not None and output.detached))
        else:  # only the adopting leader's lease holds it now
            why = decide(now, renewed, seconds, False, False)
        step = custody.step(now, why, renewer.adopted_at if renewer else None)
        if custody.state == ORPHAN and output is not None and not output.detached:
            _say(f"its output goes to {output.log_path} from now on")  # the session's last line
            output.detach()
        if step.say is not None:
            say(step.say)
        if custody.state == ORPHAN and renewer is not None and claim is not None and not renewer.claiming:
            renewer.claim(claim)
        if step.end is not None:
            say(f"{step.end}: ending this worker's processes (process group {os.getpgrp()})")
            os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    seconds, window = DEFAULT_LEASE, 0.0
    try:
        while args[:1] in (["--seconds"], ["--adopt-window"]):
            if args[0] == "--seconds":
                seconds = check_seconds(float(args[1]))
            else:
                window = check_window(float(args[1]))
            args = args[2:]
        if args[:1] != ["--"] or len(args) < 2:
            raise ValueError("usage: python -m elastic.worker.lease [--seconds N] [--adopt-window W] "
                             "-- COMMAND ARGS...")
    except (ValueError, IndexError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run(args[1:], seconds, window)
    except OSError as exc:
        print(f"error: cannot run {args[1]}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
