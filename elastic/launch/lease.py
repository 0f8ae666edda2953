"""A worker's processes end when the launcher that started them is gone: the lease wrapper.

    python -m elastic.launch.lease [--seconds N] -- COMMAND ARGS...

``elastic-run`` puts this in front of the training command (``--lease``, default
``DEFAULT_LEASE`` s; 0 leaves it out), so it runs on every worker host as the first process of
the job there, from the moment the host's shell starts it (before the training imports
anything). It starts COMMAND as its child, in its own process group (the group of the shell
the worker's ssh session runs), forwards every SIGTERM/SIGINT/SIGHUP it gets to the child (one
signal each: the reap's and elastic-run's SIGTERM reach the trainer once), and exits with the
child's code (128+N when the child died of signal N). Meanwhile it watches, every ``TICK`` s:

- the lease: while ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT`` (Horovod sets them for every
  elastic worker: the driver's HTTP server in horovodrun) are set, a thread asks that server
  for ``LEASE_PATH`` every ``POLL`` s (``POLL`` s deadline); any HTTP answer renews the lease
  (the path is a key-value scope nobody writes: the driver answers 404 without a log line). No answer
  for N seconds (a launcher killed, a node gone with no FIN: the connections stay half-open, a
  launcher frozen) and the lease is lost. N must outlast a stalled driver (a GIL hold, a
  throttled pod: the driver tolerates 6 s stalls of its own, so N >= 15 by default; see
  ``check_seconds``);
- the session: the process that started this one has gone (the parent changed), or nobody
  reads this process's stdout or stderr any more (a pipe or socket whose other end closed:
  sshd ended the session, its client-alive check included, or horovodrun's output relay is
  gone). This covers the time before the training registers with the driver and any worker
  whose driver is unreachable from the start.

On a loss it writes one line to stderr (if anyone still reads it) and sends SIGKILL to its
process group (itself, the shell that started it, the training and everything it started):
the old world is gone within N + ``POLL`` seconds of its launcher, or within the session's
end, whichever comes first. ``decide`` is the pure rule; ``main`` the I/O around it.
Standard library only (it runs before anything else on the worker).
"""
from __future__ import annotations

import http.client
import math
import os
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

DEFAULT_LEASE = 15.0
MIN_LEASE = 5.0
MAX_LEASE = 3600.0
LEASE_PATH = "/elastic-run-lease/ping"
POLL = 2.0  # seconds between two questions to the driver, and each one's deadline
TICK = 0.5
ADDR_ENV = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
PORT_ENV = "HOROVOD_GLOO_RENDEZVOUS_PORT"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def check_seconds(value: float) -> float:
    """A lease length: 0 (off) or ``MIN_LEASE``..``MAX_LEASE`` seconds; ValueError naming the
    value otherwise. Below ``MIN_LEASE`` a stalled driver (seconds, on a loaded node) would end
    healthy workers."""
    if not math.isfinite(value) or (value != 0 and not MIN_LEASE <= value <= MAX_LEASE):
        raise ValueError(f"the lease must be 0 (off) or {MIN_LEASE:g}..{MAX_LEASE:g} seconds, got {value!r}")
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


class Renewer:
    """Asks the driver's HTTP server at ``addr:port`` for ``LEASE_PATH`` every ``POLL`` s in a daemon
    thread; ``renewed`` is when it last answered (any status), starting at ``start()``."""

    def __init__(self, addr: str, port: int):
        self._addr = addr
        self._port = port
        self.renewed = time.monotonic()

    def start(self) -> Renewer:
        threading.Thread(target=self._run, name="lease", daemon=True).start()
        return self

    def ask(self) -> bool:
        asked = time.monotonic()
        conn = http.client.HTTPConnection(self._addr, self._port, timeout=POLL)
        try:
            conn.request("GET", LEASE_PATH)
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()
        self.renewed = max(self.renewed, asked)
        return True

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            self.ask()
            time.sleep(max(0.0, POLL - (time.monotonic() - started)))


def renewer_from_env(environ: dict[str, str] | os._Environ[str]) -> Renewer | None:
    """The driver to ask, from Horovod's variables; None when they are absent or bad."""
    addr, port = environ.get(ADDR_ENV, ""), environ.get(PORT_ENV, "")
    if not addr or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return Renewer(addr, int(port))


def _say(line: str) -> None:
    try:
        os.write(2, f"elastic-run lease: {line}\n".encode())
    except OSError:
        pass


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run(command: Sequence[str], seconds: float) -> int:
    """Run ``command`` under the watch described in the module docstring; its exit code.
    Never returns when the watch ends the process group."""
    parent = os.getppid()
    child = subprocess.Popen(list(command))
    sent: set[int] = set()

    def forward(signum, _frame) -> None:
        if signum not in sent:  # one each: a signal the child got twice would mean "now"
            sent.add(signum)
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass
    for sig in FORWARDED:
        signal.signal(sig, forward)
    renewer = renewer_from_env(os.environ) if seconds > 0 else None
    if renewer is not None:
        renewer.start()
    while True:
        try:
            return _exit_code(child.wait(timeout=TICK))
        except subprocess.TimeoutExpired:
            pass
        why = decide(time.monotonic(), renewer.renewed if renewer else None, seconds,
                     os.getppid() != parent, hung_up((1, 2)))
        if why is not None:
            _say(f"{why}: ending this worker's processes (process group {os.getpgrp()})")
            os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    seconds = DEFAULT_LEASE
    try:
        if args[:1] == ["--seconds"]:
            seconds = check_seconds(float(args[1]))
            args = args[2:]
        if args[:1] != ["--"] or len(args) < 2:
            raise ValueError("usage: python -m elastic.launch.lease [--seconds N] -- COMMAND ARGS...")
    except (ValueError, IndexError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return run(args[1:], seconds)
    except OSError as exc:
        print(f"error: cannot run {args[1]}: {exc.strerror or exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
