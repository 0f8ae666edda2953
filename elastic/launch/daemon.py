"""The discovery daemon as the launcher sees it: probe one, or start one and stop it later.

- ``probe(url)`` -> bool: does a daemon answer ``GET url/healthz`` with 200 (blocks up to
  ``timeout`` seconds; never raises). Every request goes through ``shared.daemon_client``
  (``http://`` and ``unix:`` URLs; the bearer token from ``DISCOVERY_TOKEN``).
- ``fetch_hosts(url)`` -> list of ``host:slots`` lines from ``GET url/hosts`` (raises
  ``DaemonUnavailable`` when it does not answer with 200).
- ``daemon_command(...)`` -> argv (pure).
- ``ManagedDaemon``: ``start()`` runs ``discovery-daemon`` in the background on a free
  loopback port and blocks until ``/readyz`` answers 200 (or raises ``DaemonStartError`` with
  the daemon's last stderr line); ``spawn()`` then ``wait_ready()`` are the same in two steps,
  the URL known before the daemon answers; ``stop()`` ends it (SIGTERM, then SIGKILL after a grace
  period) and is safe to call twice. Nothing starts in the constructor. The daemon is tied to
  the thread that started it (``elastic.common.procs.tied_popen``): if the launcher dies, even
  by ``kill -9``, the kernel kills the daemon, and its prepare commands die with it
  (``elastic.prepare.hook`` ties itself to the daemon). A daemon that exits while it should
  run (killed, OOM, a crash) is started again on the same port by a watcher thread, with a
  backoff of 1 s doubling to 30 s while it fails to become ready; each restart is one warning
  line and counted in ``restarts``. Meanwhile ``discover-hosts`` fails and horovodrun keeps its
  last host set (the client's contract): no host change is lost, the restarted daemon serves the
  pods as they are then. ``stop()`` ends the watcher first, so a stop is never taken for a crash.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from elastic.common.procs import tied_popen
from elastic.errors import DaemonStartError, DaemonUnavailable
from shared import daemon_client
from shared import discovery_wire as wire
from shared.worker import Worker

log = logging.getLogger("elastic.run")


def _get(url: str, path: str, timeout: float) -> tuple[int, str]:
    """``GET {url}{path}`` through ``shared.daemon_client`` (``http://`` or ``unix:`` URL, the
    bearer token from ``DISCOVERY_TOKEN``) -> (status, body); ``DaemonUnavailable`` when no
    whole answer comes within ``timeout``."""
    try:
        status, _, body = daemon_client.get(url, path, os.environ.get(daemon_client.TOKEN_ENV) or None, timeout)
    except (daemon_client.Unanswered, daemon_client.BadURL) as exc:
        raise DaemonUnavailable(f"discovery {exc}" if isinstance(exc, daemon_client.Unanswered) else str(exc)) \
            from exc
    return status, body.decode("utf-8", "replace")


def probe(url: str, timeout: float = 2.0) -> bool:
    """True when a daemon answers ``GET {url}/healthz`` with 200."""
    try:
        status, _ = _get(url, wire.HEALTHZ, timeout)
    except DaemonUnavailable:
        return False
    return status == 200


def fetch_hosts(url: str, timeout: float = 5.0) -> list[str]:
    """The daemon's current ``host:slots`` lines (sorted as served)."""
    status, body = _get(url, wire.HOSTS, timeout)
    if status != 200:
        raise DaemonUnavailable(f"discovery daemon at {url} answered {wire.HOSTS} with HTTP {status}")
    return [line.strip() for line in body.splitlines() if line.strip()]


def free_loopback_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class DaemonSpec:
    """How to start a daemon: the pods to watch and an optional per-host prepare command."""

    executable: str
    namespace: str
    selector: str
    kubeconfig: str | None = None
    prepare_cmd: str | None = None
    admitted_file: str | None = None  # where the prepared uids are kept, for a restarted daemon


def daemon_command(spec: DaemonSpec, port: int) -> list[str]:
    """argv of ``discovery-daemon`` serving on 127.0.0.1:``port``."""
    argv = [spec.executable, "--namespace", spec.namespace, "--selector", spec.selector,
            "--host", "127.0.0.1", "--port", str(port)]
    if spec.kubeconfig:
        argv += ["--kubeconfig", spec.kubeconfig]
    if spec.prepare_cmd:
        argv += ["--prepare-cmd", spec.prepare_cmd]
        if spec.admitted_file:
            argv += ["--admitted-file", spec.admitted_file]
    return argv


class ManagedDaemon:
    """A discovery daemon owned by the launcher (see the module docstring)."""

    def __init__(self, spec: DaemonSpec, log_path: Path, env: dict | None = None,
                 ready_timeout: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 backoff: tuple[float, float] = (1.0, 30.0), check_interval: float = 0.5):
        self._spec = spec
        self._log_path = Path(log_path)
        self._env = env
        self._ready_timeout = ready_timeout
        self._clock = clock
        self._backoff = backoff
        self._check_interval = check_interval
        self._proc: subprocess.Popen | None = None
        self._argv: list[str] = []
        self._lock = threading.Lock()
        self._watch: Worker | None = None
        self.url: str | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The daemon process's pid now (another after a restart); None when not running."""
        with self._lock:
            return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> str:
        """Start the daemon and block until it is ready; returns its URL. From then on a watcher
        thread starts it again on the same port whenever it exits, until ``stop()``."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> str:
        """Start the daemon process on a free loopback port and return its URL at once, before
        it answers (the launcher starts horovodrun meanwhile: its Python start overlaps the
        daemon's); ``wait_ready()`` then blocks until it answers."""
        port = free_loopback_port()
        self._argv = daemon_command(self._spec, port)
        self.url = f"http://127.0.0.1:{port}"
        proc = self._spawn(None)
        assert proc is not None
        return self.url

    def wait_ready(self) -> str:
        """Block until the daemon ``spawn()`` started is ready (``DaemonStartError`` as for
        ``start()``: it exited, or was not ready within the ready timeout and is stopped); its
        URL. From then on the watcher restarts it whenever it exits, until ``stop()``."""
        with self._lock:
            proc = self._proc
        if proc is None or self.url is None:
            raise DaemonStartError("discovery-daemon: wait_ready() before spawn(), or after stop()")
        self._wait_ready(proc, None)
        self._watch = Worker(self._supervise, "discovery-daemon-watch")
        self._watch.start()
        return self.url

    def _spawn(self, stopping: threading.Event | None) -> subprocess.Popen | None:
        """Start the daemon process (None when a stop came first: nothing started)."""
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if stopping is not None and stopping.is_set():
                return None
            log_file = open(self._log_path, "ab")
            try:
                # its own session (stop() ends its group); killed by the kernel if the thread
                # that started it dies (the caller of start(), or the watcher for a restart)
                self._proc = tied_popen(self._argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                        env=self._env)
            except OSError as exc:
                raise DaemonStartError(f"cannot run {self._argv[0]}: {exc.strerror or exc}") from exc
            finally:
                log_file.close()
            return self._proc

    def _wait_ready(self, proc: subprocess.Popen, stopping: threading.Event | None) -> None:
        """Block until ``proc`` answers /readyz with 200; ``DaemonStartError`` when it exits or
        the ready timeout passes (the process is then stopped)."""
        deadline = self._clock() + self._ready_timeout
        while stopping is None or not stopping.is_set():
            if proc.poll() is not None:
                raise DaemonStartError(f"discovery-daemon exited with {proc.returncode}: {self._last_log_line()}")
            try:
                status, _ = _get(self.url or "", wire.READYZ, 1.0)
                if status == 200:
                    return
            except DaemonUnavailable:
                pass
            if self._clock() > deadline:
                if stopping is None:
                    self.stop()
                else:
                    _signal_group(proc, signal.SIGKILL)
                raise DaemonStartError(
                    f"discovery-daemon not ready after {self._ready_timeout:.0f}s: {self._last_log_line()}")
            time.sleep(0.1)

    def _supervise(self) -> None:
        assert self._watch is not None
        stopping = self._watch.stopping
        delay = self._backoff[0]
        while not stopping.wait(self._check_interval):
            with self._lock:
                proc = self._proc
            if proc is None or proc.poll() is None:
                continue
            self.restarts += 1
            log.warning("discovery-daemon exited with %s (%s); starting it again on %s (restart %d)",
                        proc.returncode, self._last_log_line(), self.url, self.restarts)
            try:
                new = self._spawn(stopping)
                if new is None:
                    return
                self._wait_ready(new, stopping)
                delay = self._backoff[0]
            except DaemonStartError as exc:
                log.warning("%s; trying again in %.0f s", exc, delay)
                stopping.wait(delay)
                delay = min(delay * 2, self._backoff[1])

    def stop(self, grace: float = 10.0) -> None:
        """Stop the watcher, then the daemon (and its prepare commands); no-op when not running."""
        if self._watch is not None:
            self._watch.stopping.set()
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        if self._watch is not None:
            self._watch.stop(timeout=grace)

    def _last_log_line(self) -> str:
        try:
            lines = [line for line in self._log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "(no log)"
        return lines[-1].strip() if lines else "(no output)"


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass

