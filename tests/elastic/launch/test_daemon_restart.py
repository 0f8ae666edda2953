"""elastic-run's discovery daemon is started again when it dies (``ManagedDaemon``): on the
same port, so ``discover-hosts`` (DISCOVERY_URL) and the push poller find it again; its
prepared hosts are served at once (``--admitted-file`` in the run's work directory, see
tests/discovery/test_prepare.py); ``stop()`` is never taken for a crash."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from elastic.errors import DaemonUnavailable
from elastic.launch.daemon import DaemonSpec, ManagedDaemon, fetch_hosts, probe
from tests.daemons import SELECTOR, fake_pod
from tests.waiting import wait_for


def test_a_killed_daemon_is_started_again_on_its_port(cluster, tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "discovery-daemon"  # the venv's, as elastic-run finds it
    spec = DaemonSpec(executable=str(exe), namespace="default", selector=SELECTOR, kubeconfig=str(cluster.kubeconfig))
    daemon = ManagedDaemon(spec, tmp_path / "daemon.log", backoff=(0.2, 1.0), check_interval=0.1)
    try:
        url = daemon.start()
        fake_pod(cluster, "w-1", "10.9.0.1")
        wait_for(lambda: served(url) == ["10.9.0.1:1"], 30, "the pod served")
        first = daemon.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: daemon.restarts == 1 and daemon.pid not in (None, first), 30, "a new daemon process")
        wait_for(lambda: served(url) == ["10.9.0.1:1"], 60, "the same URL serving again")
        assert daemon.url == url
        second = daemon.pid
    finally:
        daemon.stop()
    assert daemon.pid is None and not probe(url, timeout=1.0)
    assert daemon.restarts == 1, "stop() was taken for a crash"
    assert second is not None and not Path(f"/proc/{second}").exists() or _zombie(second)
    assert "starting it again" not in (tmp_path / "daemon.log").read_text()  # the warning goes to our log


def served(url: str) -> list[str] | None:
    """The daemon's hosts, or None while it does not answer (restarting) or is not synced."""
    try:
        return fetch_hosts(url, timeout=2.0)
    except DaemonUnavailable:
        return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
