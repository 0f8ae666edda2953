"""Keep-alives on both sides of a job's ssh session: when one side freezes (SIGSTOP: its
socket goes quiet, no FIN or RST, as on a hung or partitioned node), the other ends the
session within seconds -- the client by the job's ssh_config (``ServerAlive*``, written by
``ssh-bootstrap``), the pod's sshd by its ``ClientAlive*`` (the local cluster's and the
worker image's sshd_config). Real ssh, real sshd of a local-cluster pod; without the
keep-alives the client waits 60 s and the server forever."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic.ssh.config import BootstrapDir
from localcluster.testing import running_cluster
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
# both sides give up after 2 s x 3 of silence (8-14 s seen on a loaded machine); the deadline
# leaves room for load but is under the 60 s (ServerAliveInterval 15 x 4) the client took
# before, and the server never gave up
DEADLINE = 45.0


pytestmark = pytest.mark.slow  # a local cluster pod, and each test waits out a frozen peer


@pytest.fixture(scope="module")
def pod(tmp_path_factory) -> Iterator[tuple]:
    root = tmp_path_factory.mktemp("keepalive")
    with running_cluster(root / "cluster", workers=1) as c:
        ip = c.pod_ip("worker-0")
        out = root / "ssh"
        boot = subprocess.run([str(BIN / "ssh-bootstrap"), "hosts", "--identity", str(c.identity), "--out", str(out),
                               "--port", str(c.ssh_port), "--hosts", ip], capture_output=True, text=True, timeout=120)
        assert boot.returncode == 0, boot.stderr
        yield c, ip, BootstrapDir(str(out))


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rpartition(")")[2].split()[1])


def _find(argv: list[str]) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _cmdline(int(entry.name))[:len(argv)] == argv:
            return int(entry.name)
    return None


def _session_processes(pid: int) -> list[int]:
    """The sshd processes of the session that runs ``pid``: its ``sshd: user...`` ancestors
    below the pod's listening sshd."""
    found = []
    pid = _ppid(pid)
    while pid > 1 and _cmdline(pid)[0].startswith("sshd:") and "[listener]" not in _cmdline(pid)[0]:
        found.append(pid)
        pid = _ppid(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _open_session(layout: BootstrapDir, ip: str) -> tuple[subprocess.Popen, int, list[int]]:
    """A job-style session (the pinning wrapper horovodrun uses) running a unique ``sleep``:
    (the local ssh client, the remote sleep's pid, the sshd session's pids)."""
    marker = str(random.randrange(10**6, 10**7))
    client = subprocess.Popen([str(layout.ssh_wrapper), ip, f"exec sleep {marker}"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    remote = wait_for(lambda: _find(["sleep", marker]), DEADLINE, "the remote command to start")
    session = wait_for(lambda: _session_processes(remote), DEADLINE, "the sshd session of the remote command")
    return client, remote, session


def test_the_job_ssh_config_has_short_keepalives(pod):
    _, _, layout = pod
    lines = [line.strip() for line in layout.ssh_config.read_text().splitlines()]
    assert "ServerAliveInterval 2" in lines and "ServerAliveCountMax 3" in lines


def test_a_frozen_server_ends_the_client_in_seconds(pod):
    _, ip, layout = pod
    client, remote, session = _open_session(layout, ip)
    try:
        _signal(session, signal.SIGSTOP)  # the pod's side goes quiet: no FIN, no RST
        wait_for(lambda: client.poll() is not None, DEADLINE, "the ssh client to give up on the frozen server",
                 interval=0.2)
        assert client.returncode == 255
    finally:
        _signal(session, signal.SIGCONT)
        _signal([remote], signal.SIGKILL)
        client.kill()
        client.communicate()


def test_a_frozen_client_ends_the_server_session_in_seconds(pod):
    _, ip, layout = pod
    client, remote, session = _open_session(layout, ip)
    try:
        client.send_signal(signal.SIGSTOP)  # the launcher's side goes quiet
        wait_for(lambda: not any(_alive(p) for p in session), DEADLINE,
                 "the pod's sshd to end the session of the frozen client", interval=0.2)
    finally:
        _signal([remote], signal.SIGKILL)
        client.send_signal(signal.SIGCONT)
        client.kill()
        client.communicate()
