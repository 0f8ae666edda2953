"""elastic.worker.lease, the worker side of "no second world": the rule (``decide``, a table)
and the wrapper as real processes on this machine. A driver (an HTTP server) that answers
keeps the worker alive; one that goes silent (accepts, never answers: a frozen launcher, a
half-open connection) or whose session is gone ends the worker's whole process group within
the lease; signals reach the command once; the exit code is the command's."""
from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from elastic.worker.lease import (
    ADDR_ENV,
    DEFAULT_LEASE,
    LATE,
    POLL,
    PORT_ENV,
    TICK,
    Judge,
    check_seconds,
    decide,
    hung_up,
)
from tests.runtime.liveness import pid_gone
from tests.waiting import wait_for

LEASE = 5.0  # the smallest lease the wrapper takes: the tests wait for it to run out


@pytest.mark.parametrize(("now", "renewed", "seconds", "parent", "output", "reason"), [
    (100.0, 99.0, 15.0, False, False, None),
    (100.0, 84.0, 15.0, False, False, "no answer from the driver for 16.0 s (lease 15 s)"),
    (100.0, 84.0, 0.0, False, False, None),  # lease off
    (100.0, None, 15.0, False, False, None),  # no driver to ask
    (100.0, 99.0, 15.0, True, False, "the process that started this worker is gone"),
    (100.0, 99.0, 15.0, False, True, "nobody reads this worker's output (its ssh session or launcher is gone)"),
])
def test_decide(now, renewed, seconds, parent, output, reason):
    assert decide(now, renewed, seconds, parent, output) == reason


@pytest.mark.parametrize("value", [1.0, 4.9, -1.0, float("nan"), float("inf"), 3601.0])
def test_a_bad_lease_is_refused(value):
    with pytest.raises(ValueError, match="the lease must be 0"):
        check_seconds(value)


def test_the_judge_counts_the_drivers_silence_only_while_the_wrapper_ran():
    """Checks every TICK: the renewal is the driver's last answer. A check that comes late (the
    wrapper's pod was frozen: the driver could not be heard) moves it forward by the pause and
    POLL s more; a new answer starts afresh."""
    judge = Judge(0.0)
    assert judge.renewed(TICK, 0.0) == 0.0
    assert judge.renewed(2 * TICK, 0.0) == 0.0  # on time: the silence counts
    paused = 2 * TICK + TICK + LATE + 5.0  # 5 s more than LATE late
    assert judge.renewed(paused, 0.0) == pytest.approx(LATE + 5.0 + POLL)
    assert judge.renewed(paused + TICK, 0.0) == pytest.approx(LATE + 5.0 + POLL)  # kept until an answer
    assert judge.renewed(paused + 2 * TICK, paused + 0.1) == paused + 0.1  # an answer: afresh


def test_the_default_lease_outlasts_the_drivers_own_stall_and_ends_a_silent_one_within_10_s():
    """The arithmetic the default rests on: the driver tolerates 6 s stalls of its own; such a
    stall looks like at most 6 s + POLL of silence; a silent launcher's world ends within the
    lease + TICK."""
    assert 6.0 + POLL + 0.5 < DEFAULT_LEASE and DEFAULT_LEASE + TICK < 10.0


def test_hung_up_sees_a_pipe_whose_reader_is_gone():
    r, w = os.pipe()
    try:
        assert not hung_up([w])
        os.close(r)
        assert hung_up([w])
    finally:
        os.close(w)


class _Driver:
    """An HTTP server on loopback standing in for horovodrun's; ``silence()`` keeps accepting
    connections (the kernel's backlog) but answers none, as a frozen or vanished launcher."""

    def __init__(self) -> None:
        self.silent = threading.Event()
        self.answers: list[float] = []  # when it answered the wrapper (monotonic)
        self.stall_for = 0.0  # stall_next(): the next question starts a stall this long
        self.stalled: list[float] = []  # when each stall started (the question's arrival)
        self._lock = threading.Lock()
        self._until = 0.0
        driver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if driver.silent.is_set():
                    driver.silent.wait(60)
                    return
                driver.hold()
                self.send_error(404)
                driver.answers.append(time.monotonic())

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stall_next(self, seconds: float) -> None:
        """The next question starts a stall: it and every question arriving during the next
        ``seconds`` are answered only when the stall ends (a driver stopped or holding the GIL
        with a question in flight: the kernel's backlog keeps them)."""
        with self._lock:
            self.stall_for = seconds

    def hold(self) -> None:
        with self._lock:
            now = time.monotonic()
            if self.stall_for:
                self._until, self.stall_for = now + self.stall_for, 0.0
                self.stalled.append(now)
            until = self._until
        if until > now:
            time.sleep(until - now)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def driver():
    d = _Driver()
    yield d
    d.silent.clear()
    d.close()


def _alive(pid: int) -> bool:
    return not pid_gone(pid)


# the worker: a training stand-in that starts a child of its own (a data-loading process)
WORKER = "sleep 3011 & echo $! > child; echo $$ > pid; wait"


def _start(tmp_path: Path, port: int | None, lease: float = LEASE, stdout=None) -> subprocess.Popen:
    env = dict(os.environ)
    if port is not None:
        env.update({ADDR_ENV: "127.0.0.1", PORT_ENV: str(port)})
    return subprocess.Popen([sys.executable, "-m", "elastic.worker.lease", "--seconds", f"{lease:g}", "--",
                             "sh", "-c", WORKER], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=subprocess.PIPE, start_new_session=True)


def _pids(tmp_path: Path) -> tuple[int, int]:
    wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "pid").exists(), 60, "the worker to start")
    wait_for(lambda: (tmp_path / "child").read_text().strip() and (tmp_path / "pid").read_text().strip(), 10,
             "the worker's pid files")
    return int((tmp_path / "pid").read_text()), int((tmp_path / "child").read_text())


def _cleanup(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


@pytest.mark.timeout(120)
def test_a_silent_driver_ends_the_worker_and_its_children(tmp_path, driver):
    """The launcher froze or its node vanished: no FIN, the driver's port accepts and never
    answers. The worker and its child end within the lease; before the lease ran out they ran."""
    proc = _start(tmp_path, driver.port)
    try:
        worker, child = _pids(tmp_path)
        assert proc.poll() is None
        silenced = time.monotonic()
        driver.silent.set()
        wait_for(lambda: proc.poll() is not None, 60, "the wrapper to end", interval=0.1)
        wait_for(lambda: not _alive(worker) and not _alive(child), 10, "the worker and its child to end")
        assert time.monotonic() - silenced >= LEASE - 1  # not before the lease ran out
        assert proc.returncode == -signal.SIGKILL
        assert "no answer from the driver" in proc.stderr.read().decode()
    finally:
        _cleanup(proc)


@pytest.mark.timeout(120)
def test_a_driver_that_answers_keeps_the_worker(tmp_path, driver):
    """Twice the lease with a driver that answers: the worker is still there."""
    proc = _start(tmp_path, driver.port)
    try:
        worker, child = _pids(tmp_path)
        first = wait_for(lambda: driver.answers[:1], 30, "the wrapper's first question")[0]
        wait_for(lambda: driver.answers[-1] - first > 2 * LEASE, 60, "answers spanning twice the lease",
                 alive=lambda: None if proc.poll() is None else pytest.fail(proc.stderr.read().decode()))
        assert proc.poll() is None
        assert _alive(worker) and _alive(child)
    finally:
        _cleanup(proc)


@pytest.mark.timeout(120)
def test_a_6_s_driver_stall_loses_nothing_under_the_default_lease(tmp_path, driver):
    """The driver stalls 6 s (the stalls it tolerates of itself) with the wrapper's question in
    flight, twice: the worker and its child live on, under a lease short enough (8 s) to end a
    silent launcher's world within 10 s."""
    proc = _start(tmp_path, driver.port, lease=DEFAULT_LEASE)
    try:
        worker, child = _pids(tmp_path)
        running = lambda: None if proc.poll() is None else pytest.fail(proc.stderr.read().decode())  # noqa: E731
        for stall in range(2):
            wait_for(lambda: len(driver.answers) >= 2, 30, "the wrapper's questions", alive=running)
            driver.stall_next(6.0)
            wait_for(lambda n=stall: len(driver.stalled) > n, 30, "a question to start the stall", alive=running)
            started = driver.stalled[-1]
            wait_for(lambda t=started: any(a > t + 6.0 for a in driver.answers), 30, "the stall to end",
                     alive=running)
            seen = len(driver.answers)
            wait_for(lambda n=seen: len(driver.answers) >= n + 3, 30, "answers after the stall", alive=running)
        assert proc.poll() is None
        assert _alive(worker) and _alive(child)
    finally:
        _cleanup(proc)


@pytest.mark.timeout(120)
def test_a_closed_session_ends_the_worker(tmp_path):
    """Nobody reads the worker's output any more (sshd ended the session; no driver to ask):
    the worker ends at once, before any lease could run out."""
    r, w = os.pipe()
    proc = _start(tmp_path, None, lease=3600, stdout=w)
    os.close(w)
    try:
        worker, child = _pids(tmp_path)
        os.close(r)
        wait_for(lambda: proc.poll() is not None, 30, "the wrapper to end", interval=0.1)
        wait_for(lambda: not _alive(worker) and not _alive(child), 10, "the worker and its child to end")
    finally:
        _cleanup(proc)


@pytest.mark.timeout(120)
def test_sigterm_reaches_the_command_once_and_its_code_is_kept(tmp_path):
    """A SIGTERM (elastic-run's drain, the reap) reaches the training once, however often the
    wrapper gets it; the wrapper exits with the training's code."""
    script = "trap 'echo term >> terms; exit 7' TERM; echo $$ > pid; touch child; while :; do sleep 0.05; done"
    proc = subprocess.Popen([sys.executable, "-m", "elastic.worker.lease", "--seconds", "0", "--",
                             "sh", "-c", script], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text().strip(), 60,
                 "the command to start")
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 7
        assert (tmp_path / "terms").read_text().split() == ["term"]
    finally:
        _cleanup(proc)


def test_bad_usage_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, "-m", "elastic.worker.lease", "--seconds", "2", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: the lease must be 0 (off) or 5..3600 seconds, got 2.0"]


def test_a_port_nobody_listens_on_counts_as_silence():
    """A driver whose port is closed (RST): no answer, so no renewal."""
    from elastic.worker.lease import Renewer
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert not Renewer("127.0.0.1", port).ask()


def test_the_drivers_own_server_answers_the_lease_quietly(caplog):
    """The question goes to horovodrun's real rendezvous server (the elastic handler): it is
    answered (the lease renewed) and the driver logs nothing for it. Before: ``GET /`` logged
    ``KVStore ERROR: Invalid request path`` every 2 s per worker."""
    import logging

    from horovod.runner.elastic.rendezvous import create_rendezvous_handler
    from horovod.runner.http.http_server import RendezvousServer

    from elastic.worker.lease import Renewer
    server = RendezvousServer()
    port = server.start(create_rendezvous_handler(driver=None))
    try:
        with caplog.at_level(logging.DEBUG):
            assert Renewer("127.0.0.1", port).ask()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        server.stop()


def test_the_renewer_thread_renews_until_stopped():
    """``start()`` asks the driver in the background (``renewed`` moves on); ``stop()`` ends
    the thread (shared.worker's lifecycle), so no ``lease`` thread is left behind."""
    import threading

    from horovod.runner.elastic.rendezvous import create_rendezvous_handler
    from horovod.runner.http.http_server import RendezvousServer

    from elastic.worker.lease import Renewer
    from tests.waiting import wait_for
    server = RendezvousServer()
    port = server.start(create_rendezvous_handler(driver=None))
    try:
        renewer = Renewer("127.0.0.1", port)
        first = renewer.renewed
        renewer.start()
        wait_for(lambda: renewer.renewed > first, timeout=60, what="a renewal")
        assert renewer.stop(timeout=60)
        assert not [t for t in threading.enumerate() if t.name == "lease"]
    finally:
        server.stop()
