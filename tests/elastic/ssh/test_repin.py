"""Reused pod IPs: the prepare hook re-pins an address's host key only for a new pod uid
(the discovery daemon's DISCOVERY_POD_UID), refuses a changed key otherwise, and concurrent
single-host hooks on one ssh dir keep every pin and every hostfile line.

Real sshd (throwaway servers, because the local cluster avoids reusing pod addresses), real
``ssh-bootstrap`` and ``python -m elastic.prepare.hook`` processes."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from elastic.common.hostlist import Host, merge_hostfile
from elastic.errors import ConfigError
from elastic.ssh.config import BootstrapDir
from elastic.ssh.exec import HostKeyUnverified, SSHClient
from elastic.ssh.known_hosts import KnownHosts, fingerprint, repin
from elastic.ssh.pin_owners import is_new_incarnation, parse_pin_owners, render_pin_owners
from tests.elastic.conftest import BIN, Sshd, cli, keygen

REPO = Path(__file__).resolve().parents[3]  # the repository (tests/elastic/ssh/ is three down)


def _hook(server: Sshd, ssh_dir: Path, uid: str | None, identity: Path | None = None) -> subprocess.CompletedProcess:
    """The daemon's prepare command for ``server`` as the daemon runs it (uid in the env)."""
    env = {k: v for k, v in os.environ.items() if k != "DISCOVERY_POD_UID"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    if uid is not None:
        env["DISCOVERY_POD_UID"] = uid
    return subprocess.run(
        [sys.executable, "-m", "elastic.prepare.hook", "--identity", str(identity or server.identity),
         "--ssh-dir", str(ssh_dir), "--ssh-port", str(server.port), server.address],
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL, env=env, cwd=REPO)


def _pub(path: Path) -> str:
    return path.with_name(path.name + ".pub").read_text().split()[1]


def _pins(ssh_dir: Path, server: Sshd) -> dict[str, str]:
    return KnownHosts.parse((ssh_dir / "known_hosts").read_text()).keys_for(f"[{server.address}]:{server.port}")


def _hostname_via_wrapper(ssh_dir: Path, address: str) -> subprocess.CompletedProcess:
    """``hostname`` through DIR/bin/ssh: the path horovodrun's ssh takes."""
    client = SSHClient(config=None, ssh=str(BootstrapDir(ssh_dir).ssh_wrapper), connect_timeout=10)
    return client.run(address, "hostname", timeout=30)


def test_new_pod_uid_repins_a_reused_address_same_or_no_uid_is_refused(sshd_factory, tmp_path):
    server = sshd_factory()
    key_a, key_b, key_c = (keygen(tmp_path / f"host_{n}") for n in "abc")
    out = tmp_path / "ssh"
    server.start(key_a)
    first = _hook(server, out, "uid-1")
    assert first.returncode == 0, first.stderr
    assert _pins(out, server) == {"ssh-ed25519": _pub(key_a)}
    assert (out / "hostfile").read_text() == f"{server.address} slots=1\n"

    server.stop()
    server.start(key_b)  # the same address, a different key
    for uid in ("uid-1", None):  # the same pod (or nobody vouching for a new one): refused, pin kept
        refused = _hook(server, out, uid)
        assert refused.returncode == 1
        assert "HOST KEY CHANGED" in refused.stderr and f"[{server.address}]:{server.port}" in refused.stderr
        assert _pins(out, server) == {"ssh-ed25519": _pub(key_a)}
        assert (out / "hostfile").read_text() == ""  # a host that failed is not served from the hostfile
    with pytest.raises(HostKeyUnverified, match="host key verification failed"):  # horovodrun's ssh refuses it too
        _hostname_via_wrapper(out, server.address)

    # The API server says the address now belongs to pod uid-2: its key replaces the pin.
    repinned = _hook(server, out, "uid-2")
    assert repinned.returncode == 0, repinned.stderr
    assert _pins(out, server) == {"ssh-ed25519": _pub(key_b)}
    assert (out / "hostfile").read_text() == f"{server.address} slots=1\n"
    assert json.loads((out / "pins.json").read_text())["uids"] == {f"[{server.address}]:{server.port}": "uid-2"}
    assert _hostname_via_wrapper(out, server.address).returncode == 0

    # ... and only then: a further change under the same uid is refused again.
    server.stop()
    server.start(key_c)
    again = _hook(server, out, "uid-2")
    assert again.returncode == 1 and "HOST KEY CHANGED" in again.stderr
    assert _pins(out, server) == {"ssh-ed25519": _pub(key_b)}


def test_repin_is_reported_in_the_table_and_needs_exactly_one_host(sshd_factory, tmp_path):
    server = sshd_factory()
    key_a, key_b = keygen(tmp_path / "host_a"), keygen(tmp_path / "host_b")
    out = tmp_path / "ssh"
    base = ["hosts", "--identity", str(server.identity), "--out", str(out), "--port", str(server.port)]
    server.start(key_a)
    assert cli("ssh-bootstrap", *base, "--hosts", server.address).returncode == 0  # pinned without a uid
    server.stop()
    server.start(key_b)
    proc = cli("ssh-bootstrap", *base, "--hosts", server.address, "--repin-for-uid", "pod-7")
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith(server.address))
    assert "repinned" in row.split()
    assert f"re-pinned for new pod uid pod-7: {fingerprint(_pub(key_a))} -> {fingerprint(_pub(key_b))}" in proc.stderr
    bad = cli("ssh-bootstrap", *base, "--hosts", f"{server.address},127.0.0.1", "--repin-for-uid", "pod-7")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "exactly one host" in bad.stderr
    (out / "pins.json").write_text("{not json")
    broken = cli("ssh-bootstrap", *base, "--hosts", server.address, "--repin-for-uid", "pod-8")
    assert broken.returncode == 2 and "pins.json is not JSON" in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1


def _same_port(server: Sshd, port: int, index: int) -> None:
    """Move ``server`` (not started) to a free loopback address on ``port``."""
    base = 200 + (os.getpid() + 17) % 50
    for third in range(1, 255):
        address = f"127.{base}.{third}.{index}"
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                continue
        lines = [line for line in server.config.read_text().splitlines() if not line.startswith("ListenAddress ")]
        server.config.write_text("\n".join([f"ListenAddress {address}:{port}", *lines]) + "\n")
        server.address, server.port = address, port
        return
    raise RuntimeError("no free loopback address")


def test_concurrent_single_host_hooks_keep_every_pin_and_hostfile_line(sshd_factory, tmp_path):
    servers = [sshd_factory(f"sshd{i}") for i in range(3)]
    port = servers[0].port
    identity = servers[0].identity
    for i, server in enumerate(servers):
        _same_port(server, port, 10 + i)
        (server.config.parent / "authorized_keys").write_text(identity.with_name("client_key.pub").read_text())
        server.start(keygen(tmp_path / f"host{i}"))
    out = tmp_path / "ssh"
    # One host prepared earlier, then two new pods prepared at the same time.
    assert _hook(servers[0], out, "uid-0", identity).returncode == 0
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda i: _hook(servers[i], out, f"uid-{i}", identity), (1, 2)))
    assert [p.returncode for p in procs] == [0, 0], [p.stderr for p in procs]
    for server in servers:
        assert len(_pins(out, server)) == 1
        assert _hostname_via_wrapper(out, server.address).returncode == 0
    lines = (out / "hostfile").read_text().splitlines()
    assert sorted(lines) == sorted(f"{s.address} slots=1" for s in servers)
    assert set(json.loads((out / "pins.json").read_text())["uids"].values()) == {"uid-0", "uid-1", "uid-2"}


def test_repin_replaces_every_pin_of_the_name_only():
    known = KnownHosts.parse("[h]:22 ssh-rsa AAAA\n[h]:22,other ssh-ed25519 QUFB\n[g]:22 ssh-ed25519 QkJC\n# note\n")
    result = repin(known, "[h]:22", "ssh-ed25519", "Q0ND")
    assert result.status == "repinned" and result.pinned_fingerprint == fingerprint("QUFB")
    assert result.known_hosts.render() == ("# note\nother ssh-ed25519 QUFB\n[g]:22 ssh-ed25519 QkJC\n"
                                           "[h]:22 ssh-ed25519 Q0ND\n")
    assert repin(KnownHosts(), "[h]:22", "ssh-ed25519", "Q0ND").status == "new"
    same = KnownHosts.parse("[h]:22 ssh-ed25519 Q0ND\n")
    assert repin(same, "[h]:22", "ssh-ed25519", "Q0ND").known_hosts == same


def test_pin_owner_file_and_incarnation_rule():
    assert parse_pin_owners(render_pin_owners({"[b]:1": "u2", "[a]:1": "u1"})) == {"[a]:1": "u1", "[b]:1": "u2"}
    assert parse_pin_owners("") == {}
    for bad in ("[]", '{"version": 2, "uids": {}}', '{"version": 1, "uids": {"a": 3}}'):
        with pytest.raises(ConfigError, match="pin-owner file"):
            parse_pin_owners(bad)
    assert is_new_incarnation(None, "u1") and is_new_incarnation("u1", "u2")
    assert not is_new_incarnation("u1", "u1") and not is_new_incarnation("u1", None)
    assert not is_new_incarnation(None, None) and not is_new_incarnation("u1", "")


def test_merge_hostfile_keeps_other_hosts_replaces_and_drops_the_handled_ones():
    existing = [Host("a", 1), Host("b", 2), Host("c", 1)]
    merged = merge_hostfile(existing, ["b", "c", "d"], [Host("b", 4), Host("d", 1)])
    assert merged == [Host("a", 1), Host("b", 4), Host("d", 1)]
    assert merge_hostfile([], ["x"], []) == []


def test_the_hook_reports_the_cause_not_the_summary_or_stdout():
    from elastic.prepare.hook import failure_line

    stderr = "error: HOST KEY CHANGED for [h]:22: ...\nerror: 1 of 1 hosts failed: h\n"
    assert failure_line(stderr, "horovodrun env:   X=1\n").startswith("HOST KEY CHANGED for [h]:22")
    assert failure_line("warning: slow\nrsync: broken pipe\n", "table\n") == "rsync: broken pipe"
    assert failure_line("", "last\n") == "last" and failure_line("", "") == "no output"
