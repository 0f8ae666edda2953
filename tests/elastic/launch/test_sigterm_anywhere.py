"""A SIGTERM to elastic-run before the training starts is never lost, wherever the main thread
is when it arrives: inside a log write (logging's ``emit`` catches ``Exception`` and prints
"--- Logging error ---") or inside any ``except Exception`` on the way. CI once saw the launcher
run on for 90 s after a SIGTERM that landed in the "running: ..." log line.

The signal is sent by the process to itself from inside the log stream's ``write``, so it lands
there every time (CPython runs the handler at the next bytecode of the main thread)."""
import dataclasses
import http.server
import io
import logging
import os
import signal
import sys
import threading

import pytest

from elastic.errors import Interrupted
from elastic.launch import runner
from elastic.launch.command import HorovodrunOptions
from elastic.launch.plan import LaunchConfig, make_plan
from shared.discovery_wire import HEALTHZ


class _KillingStream(io.StringIO):
    """A log stream that sends SIGTERM to this process while it writes a line containing
    ``trigger`` (once)."""

    def __init__(self, trigger: str) -> None:
        super().__init__()
        self.trigger = trigger
        self.fired = False

    def write(self, text: str) -> int:
        if self.trigger in text and not self.fired:
            self.fired = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().write(text)


@pytest.fixture
def healthy_daemon():
    """An HTTP server that answers ``/healthz`` 200 (what ``probe`` asks) and everything else
    200 with an empty body: stands in for a discovery daemon with no hosts."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            body = b"ok\n" if self.path == HEALTHZ else b""
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def log_stream():
    """elastic-run's logger writing to a stream that SIGTERMs us on "using the discovery daemon"."""
    stream = _KillingStream("using the discovery daemon")
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("elastic.run")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_a_sigterm_that_lands_in_a_log_write_stops_the_launcher(healthy_daemon, log_stream, tmp_path):
    workdir = tmp_path / "run"
    config = LaunchConfig(horovodrun=HorovodrunOptions(discovery_script="/bin/false", min_np=1),
                          command=("true",), discovery_url=healthy_daemon)
    plan = make_plan(config, run_id="r1", workdir=str(workdir))
    # were the SIGTERM lost, the launcher would go on to run this "horovodrun" and return 0
    plan = dataclasses.replace(plan, horovodrun=[sys.executable, "-c", "pass"])
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as raised:
        runner.execute(plan)
    assert log_stream.fired
    assert raised.value.signum == signal.SIGTERM and raised.value.exit_code == 128 + signal.SIGTERM
    assert "--- Logging error ---" not in log_stream.getvalue()
    assert not workdir.exists(), "the clean-up ran: the work directory is removed"
    assert signal.getsignal(signal.SIGTERM) is previous, "the handler before the run is back"


def test_the_handlers_stop_passes_every_except_exception():
    """Whatever ``except Exception`` the main thread is in when the signal lands (a probe's
    retry, a clean-up step), the stop goes through it, as Ctrl-C's ``KeyboardInterrupt`` does."""
    previous = signal.signal(signal.SIGTERM, runner._interrupt)
    swallowed = []
    try:
        with pytest.raises(BaseException) as raised:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs at the next bytecode; bounded anyway
                    pass
            except Exception as exc:  # noqa: BLE001 - the point of the test
                swallowed.append(exc)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert swallowed == [], "the stop was caught by an except Exception"
    assert raised.value.signum == signal.SIGTERM


_FORK_HOOK_ARMED: list[bool] = []


def _term_in_fork_hook() -> None:
    """An after-fork hook (in the parent) that SIGTERMs this process while armed: the handler
    then runs inside the hook, where Python prints "Exception ignored" and drops its raise."""
    if _FORK_HOOK_ARMED:
        _FORK_HOOK_ARMED.clear()
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs at the next bytecode, still inside the hook
            pass


os.register_at_fork(after_in_parent=_term_in_fork_hook)


def test_a_sigterm_that_lands_in_a_fork_hook_stops_the_launcher(healthy_daemon, tmp_path, monkeypatch):
    """``subprocess`` runs the fork hooks (logging's among them) for a ``preexec_fn``, as
    ``tied_popen`` has; a SIGTERM there once left a launcher running in CI."""
    workdir = tmp_path / "run"
    config = LaunchConfig(horovodrun=HorovodrunOptions(discovery_script="/bin/false", min_np=1),
                          command=("true",), discovery_url=healthy_daemon)
    plan = make_plan(config, run_id="r1", workdir=str(workdir))
    plan = dataclasses.replace(plan, horovodrun=[sys.executable, "-c", "pass"])
    ignored = []  # what Python dropped ("Exception ignored in ...")
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: ignored.append(unraisable.exc_type))
    _FORK_HOOK_ARMED.append(True)  # the first fork of the run: horovodrun's
    try:
        with pytest.raises(Interrupted) as raised:
            runner.execute(plan)
    finally:
        _FORK_HOOK_ARMED.clear()
    assert ignored == [runner._Terminated], "the handler's raise was dropped in the hook"
    assert raised.value.signum == signal.SIGTERM
    assert not workdir.exists(), "the clean-up ran: the work directory is removed"
