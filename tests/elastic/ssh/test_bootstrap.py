"""ssh-bootstrap against real sshd: keys and Secret, pinned host keys, the connectivity table,
loud refusal of a changed host key, and the horovodrun flags/environment it emits."""
from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest
import yaml
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from horovod.runner.util.remote import get_ssh_command

from elastic.ssh.config import BootstrapDir, horovodrun_env
from elastic.ssh.known_hosts import KnownHosts, fingerprint
from tests.elastic.conftest import cli, keygen


def _table(stdout: str) -> dict[str, dict[str, str]]:
    """Rows of the per-host table keyed by host (columns split on runs of 2+ spaces)."""
    import re

    lines = [line for line in stdout.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0])
    assert header[0] == "HOST"
    rows = {}
    for line in lines[1:]:
        if line.startswith(("wrote ", "horovodrun ")):
            break
        cells = re.split(r"\s{2,}", line, maxsplit=len(header) - 1)
        rows[cells[0]] = dict(zip(header, cells, strict=False))  # a row may leave its last cells empty
    return rows


def test_keys_writes_a_v1_secret_and_never_prints_the_private_key(tmp_path, sshd_factory):
    out = tmp_path / "keys"
    proc = cli("ssh-bootstrap", "keys", "--out", str(out), "--namespace", "train")
    assert proc.returncode == 0, proc.stderr
    private = (out / "id_ed25519").read_text()
    public = (out / "id_ed25519.pub").read_text()
    seed = load_ssh_private_key(private.encode(), None).private_bytes_raw()
    printed = proc.stdout + proc.stderr
    assert "PRIVATE KEY" not in printed and seed.hex() not in printed
    assert base64.b64encode(seed).decode()[:40] not in printed
    assert proc.stdout.splitlines() == [
        f"private key: {out}/id_ed25519 (mode 0600)", f"public key:  {out}/id_ed25519.pub",
        f"secret:      {out}/secret.yaml (Secret elastic-horovod-ssh)",
        f"fingerprint: {fingerprint(public.split()[1])}", public.strip()]
    assert oct(os.stat(out / "id_ed25519").st_mode & 0o777) == "0o600"

    secret = yaml.safe_load((out / "secret.yaml").read_text())
    assert secret["apiVersion"] == "v1" and secret["kind"] == "Secret"
    assert secret["metadata"] == {"name": "elastic-horovod-ssh", "labels": {"app": "elastic-horovod"},
                                  "namespace": "train"}
    assert base64.b64decode(secret["data"]["id_ed25519"]).decode() == private
    assert base64.b64decode(secret["data"]["id_ed25519.pub"]).decode() == public

    # The key is a working OpenSSH key: an sshd that trusts the public key lets it in.
    server = sshd_factory()
    (server.config.parent / "authorized_keys").write_text(public)
    server.start(keygen(tmp_path / "hostkey"))
    login = subprocess.run(["ssh", "-i", str(out / "id_ed25519"), "-p", str(server.port), "-o", "BatchMode=yes",
                            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                            "-o", "LogLevel=ERROR", server.address, "echo in"],
                           capture_output=True, text=True, timeout=60)
    assert login.stdout.strip() == "in", login.stderr

    again = cli("ssh-bootstrap", "keys", "--out", str(out))
    assert again.returncode == 2 and again.stderr.startswith("error: ") and "--force" in again.stderr
    assert (out / "id_ed25519").read_text() == private


def test_hosts_pins_every_pod_writes_the_files_and_reports_each_host(sync_cluster, pod_ips, tmp_path):
    out = tmp_path / "ssh"
    block = next(iter(pod_ips.values())).rsplit(".", 1)[0]
    unreachable = f"{block}.250"
    hosts = ",".join([f"{ip}:2" for ip in pod_ips.values()] + [unreachable])
    proc = cli("ssh-bootstrap", "hosts", "--identity", str(sync_cluster.identity), "--out", str(out),
               "--port", str(sync_cluster.ssh_port), "--hosts", hosts)
    assert proc.returncode == 1
    rows = _table(proc.stdout)
    for name, ip in pod_ips.items():
        assert rows[ip]["PIN"] == "new" and rows[ip]["SSH"] == "ok"
        assert rows[ip]["HOSTNAME"] == name  # the command ran on that very pod
    assert rows[unreachable]["SSH"] == "-" and "Connection refused" in rows[unreachable]["ERROR"]
    assert f"1 of 4 hosts failed: {unreachable}" in proc.stderr

    # Pins equal what the pods' sshd present (independently read with ssh-keyscan).
    known = KnownHosts.parse((out / "known_hosts").read_text())
    for ip in pod_ips.values():
        scan = subprocess.run(["ssh-keyscan", "-t", "ed25519", "-p", str(sync_cluster.ssh_port), ip],
                              capture_output=True, text=True, timeout=30).stdout.split()
        assert known.keys_for(f"[{ip}]:{sync_cluster.ssh_port}") == {"ssh-ed25519": scan[2]}
    assert known.keys_for(f"[{unreachable}]:{sync_cluster.ssh_port}") == {}
    assert (out / "hostfile").read_text() == "".join(f"{ip} slots=2\n" for ip in pod_ips.values())
    assert "StrictHostKeyChecking yes" in (out / "ssh_config").read_text()

    # The emitted flags/env, and horovod's own ssh command line, reach the pods with the pins.
    flags = json.loads(cli("ssh-bootstrap", "horovodrun-args", "--out", str(out), "--hostfile", "--json").stdout)
    assert flags["args"] == ["--ssh-port", str(sync_cluster.ssh_port), "--ssh-identity-file",
                             str(sync_cluster.identity), "--hostfile", str(out / "hostfile")]
    assert flags["env"] == {"PATH": f"{out}/bin:$PATH", "ELASTIC_SSH_CONFIG": str(out / "ssh_config")}
    env = horovodrun_env(BootstrapDir(out))
    for name, ip in pod_ips.items():
        command = get_ssh_command("hostname", ip, sync_cluster.ssh_port, str(sync_cluster.identity))
        run = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 and run.stdout.strip() == name, run.stderr

    # A second run finds the same keys.
    proc = cli("ssh-bootstrap", "hosts", "--identity", str(sync_cluster.identity), "--out", str(out),
               "--port", str(sync_cluster.ssh_port), "--hosts", ",".join(pod_ips.values()))
    assert proc.returncode == 0, proc.stderr
    assert {row["PIN"] for row in _table(proc.stdout).values()} == {"same"}


def test_changed_host_key_is_refused_loudly_also_for_horovodruns_ssh(sshd_factory, tmp_path):
    server = sshd_factory()
    key_a, key_b = keygen(tmp_path / "host_a"), keygen(tmp_path / "host_b")
    out = tmp_path / "ssh"
    args = ["hosts", "--identity", str(server.identity), "--out", str(out), "--port", str(server.port),
            "--hosts", server.address]
    server.start(key_a)
    # Without a host flag the hosts come from discover-hosts (here a stand-in printing host:slots).
    first = cli("ssh-bootstrap", *args[:-2], "--discover-cmd", f"echo {server.address}:3")
    assert first.returncode == 0, first.stderr
    assert (out / "hostfile").read_text() == f"{server.address} slots=3\n"
    pinned = (out / "known_hosts").read_text()
    env = horovodrun_env(BootstrapDir(out))
    marker = tmp_path / "ran"
    command = get_ssh_command(f"touch {marker}", server.address, server.port, str(server.identity))

    server.stop()
    server.start(key_b)  # same address and port, different host key
    second = cli("ssh-bootstrap", *args)
    assert second.returncode == 1
    assert "HOST KEY CHANGED" in second.stderr and f"[{server.address}]:{server.port}" in second.stderr
    assert _table(second.stdout)[server.address]["PIN"] == "CHANGED"
    assert (out / "known_hosts").read_text() == pinned  # the old pin stays
    # horovodrun passes '-o StrictHostKeyChecking=no'; with the emitted env its ssh still refuses.
    run = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 255 and "Host key verification failed" in run.stderr
    assert not marker.exists()

    server.stop()
    server.start(key_a)  # the pinned key again: the same command goes through
    run = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert marker.exists()


@pytest.mark.parametrize("extra, message", [
    (["--hosts", "-oProxyCommand=touch /tmp/x"], "looks like an option"),
    (["--hosts", "a;b"], "is not a host name: characters other than"),
    (["--hosts", "a b"], "bad host entry"),
    (["--hosts", "a,b", "--hosts-file", "/nonexistent"], "give only one of"),
    (["--hosts", "a", "--identity", "{tmp}/none"], "identity file"),
    (["--discover-cmd", "false"], "'false' failed"),
])
def test_hosts_bad_input_is_one_line_errors(tmp_path, sync_cluster, extra, message):
    base = ["hosts", "--out", str(tmp_path / "o"), "--identity", str(sync_cluster.identity)]
    proc = cli("ssh-bootstrap", *base, *[e.format(tmp=tmp_path) for e in extra])
    assert proc.returncode == 2, (extra, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
