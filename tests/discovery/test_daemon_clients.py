"""Every client of the daemon's protocol is ``shared.daemon_client``, and each speaks what the
threat model promises: a real daemon with ``--token``, over TCP and over a ``unix:`` socket,
read by the launcher's probe and host fetch (``elastic.launch.daemon``), the wait explainer
(``elastic.launch.waits``), push discovery in Horovod's driver (``elastic.driver.push``) and
``discover-hosts``; without the token each is refused (HTTP 401), never served."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from elastic.driver.push import DaemonDiscovery
from elastic.errors import DaemonUnavailable
from elastic.launch import daemon as launch_daemon
from elastic.launch.waits import fetch_hosts_json
from shared import daemon_client
from tests.daemons import ROOT, daemon_env, fake_pod
from tests.waiting import wait_for

TOKEN = "s3cret-token"


def _served(url: str) -> list[str] | None:
    """The launcher's view of the hosts; None while the daemon has not synced (503)."""
    try:
        return launch_daemon.fetch_hosts(url)
    except DaemonUnavailable:
        return None


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_every_client_speaks_token_and_unix_urls_to_a_real_daemon(cluster, daemon, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 transport: str) -> None:
    fake_pod(cluster, "w-1", "10.9.0.1")
    flags = ("--socket", str(tmp_path / "d.sock")) if transport == "unix" else ()
    d = daemon(cluster, *flags, token=TOKEN)
    url = d.url
    assert url.startswith("unix:" if transport == "unix" else "http://"), url

    monkeypatch.setenv("DISCOVERY_TOKEN", TOKEN)
    wait_for(lambda: launch_daemon.probe(url), 60, "the daemon's /healthz")
    wait_for(lambda: _served(url) == ["10.9.0.1:1"], 60, "the host served")
    doc = fetch_hosts_json(url)
    assert doc.host_lines() == ("10.9.0.1:1",) and doc.synced  # parsed: a typed document
    found = DaemonDiscovery(url, poll_timeout=5, first_timeout=30)
    found.start()
    try:
        assert found.find_available_hosts_and_slots() == {"10.9.0.1": 1}
    finally:
        found.stop()
    r = subprocess.run([sys.executable, "-m", "discovery.discover_hosts"], capture_output=True, text=True,
                       env=daemon_env({"DISCOVERY_URL": url, "DISCOVERY_TOKEN": TOKEN}), cwd=ROOT, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "10.9.0.1:1\n", "")

    # without the token: refused by the daemon, and each client says so (or keeps nothing)
    monkeypatch.delenv("DISCOVERY_TOKEN")
    assert launch_daemon.probe(url)  # /healthz is open, as the daemon documents
    with pytest.raises(DaemonUnavailable, match="HTTP 401"):
        launch_daemon.fetch_hosts(url)
    with pytest.raises(OSError, match="HTTP 401"):
        fetch_hosts_json(url)
    status, _, body = daemon_client.get(url, "/hosts", None, 10)
    assert status == 401 and b"token" in body
    wrong = DaemonDiscovery(url, poll_timeout=5, first_timeout=2, retry=0.1, token="wrong")
    wrong.start()
    try:
        with pytest.raises(RuntimeError, match="no host list from the discovery daemon"):
            wrong.find_available_hosts_and_slots()
    finally:
        wrong.stop()
    r = subprocess.run([sys.executable, "-m", "discovery.discover_hosts"], capture_output=True, text=True,
                       env=daemon_env({"DISCOVERY_URL": url}), cwd=ROOT, timeout=60)
    assert r.returncode == 1 and r.stdout == "" and "HTTP 401" in r.stderr


@pytest.mark.parametrize("url, message", [
    ("https://x:1", "want http://HOST:PORT or unix:/path"), ("unix:", "no socket path"),
    ("http://h:port", "port 'port'"), ("http://:1", "no host"), ("http://h:70000", "out of range"),
])
def test_a_url_no_client_speaks_is_refused_alike_by_each(url: str, message: str) -> None:
    with pytest.raises(daemon_client.BadURL, match=message):
        daemon_client.split_url(url)
    with pytest.raises(ValueError, match="discovery URL must be"):
        DaemonDiscovery(url)
    with pytest.raises(DaemonUnavailable, match=message):
        launch_daemon.fetch_hosts(url)
    assert not launch_daemon.probe(url)
