"""The discovery daemon as the launcher sees it: probe one, or start one and stop it later.

- ``probe(url)`` -> bool: does a daemon answer ``GET url/healthz`` with 200 (blocks up to
  ``timeout`` seconds; never raises). Every request goes through ``shared.daemon_client``
  (``http://`` and ``unix:`` URLs; the bearer token from ``DISCOVERY_TOKEN``).
- ``fetch_hosts(url)`` -> list of ``host:slots`` lines from ``GET url/hosts`` (raises
  ``DaemonUnavailable`` when it does not answer with 200).
- ``daemon_command(...)`` -> argv (pure).
- ``ManagedDaemon``: ``start()`` runs ``discovery-daemon`` in the background on a free
  loopback port and blocks until ``/readyz`` answers 200 (or raises ``DaemonStartError`` with
  the daemon's last stderr line); ``stop()`` ends it (SIGTERM, then SIGKILL after a grace
  period) and is safe to call twice. Nothing starts in the constructor. The daemon is tied to
  the thread that started it (``elastic.common.procs.tied_popen``): if the launcher dies, even
  by ``kill -9``, the kernel kills the daemon, and its prepare commands die with it
  (``elastic.launch.prepare`` ties itself to the daemon).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from elastic.common.procs import tied_popen
from elastic.errors import DaemonStartError, DaemonUnavailable
from shared import daemon_client


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
        status, _ = _get(url, "/healthz", timeout)
    except DaemonUnavailable:
        return False
    return status == 200


def fetch_hosts(url: str, timeout: float = 5.0) -> list[str]:
    """The daemon's current ``host:slots`` lines (sorted as served)."""
    status, body = _get(url, "/hosts", timeout)
    if status != 200:
        raise DaemonUnavailable(f"discovery daemon at {url} answered /hosts with HTTP {status}")
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


def daemon_command(spec: DaemonSpec, port: int) -> list[str]:
    """argv of ``discovery-daemon`` serving on 127.0.0.1:``port``."""
    argv = [spec.executable, "--namespace", spec.namespace, "--selector", spec.selector,
            "--host", "127.0.0.1", "--port", str(port)]
    if spec.kubeconfig:
        argv += ["--kubeconfig", spec.kubeconfig]
    if spec.prepare_cmd:
        argv += ["--prepare-cmd", spec.prepare_cmd]
    return argv


class ManagedDaemon:
    """A discovery daemon owned by the launcher (see the module docstring)."""

    def __init__(self, spec: DaemonSpec, log_path: Path, env: dict | None = None,
                 ready_timeout: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._spec = spec
        self._log_path = Path(log_path)
        self._env = env
        self._ready_timeout = ready_timeout
        self._clock = clock
        self._proc: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self) -> str:
        """Start the daemon and block until it is ready; returns its URL."""
        port = free_loopback_port()
        argv = daemon_command(self._spec, port)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self._log_path, "ab")
        try:
            # its own session (stop() ends its group); killed by the kernel if we die
            self._proc = tied_popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self._env)
        except OSError as exc:
            raise DaemonStartError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        finally:
            log.close()
        self.url = f"http://127.0.0.1:{port}"
        deadline = self._clock() + self._ready_timeout
        while True:
            if self._proc.poll() is not None:
                raise DaemonStartError(f"discovery-daemon exited with {self._proc.returncode}: {self._last_log_line()}")
            try:
                status, _ = _get(self.url, "/readyz", 1.0)
                if status == 200:
                    return self.url
            except DaemonUnavailable:
                pass
            if self._clock() > deadline:
                self.stop()
                raise DaemonStartError(
                    f"discovery-daemon not ready after {self._ready_timeout:.0f}s: {self._last_log_line()}")
            time.sleep(0.1)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the daemon (and its prepare commands); no-op when not running."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()

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

