"""Fixtures for the ssh-bootstrap and dataset-sync tests.

* ``sync_cluster``: a local cluster with three worker pods (real sshd, own /data), shared by a
  test module; ``pod_ips`` maps pod name -> address.
* ``ssh_dir``: ``ssh-bootstrap hosts`` run once against those pods (pinned keys, ssh_config).
* ``sshd_factory``: throwaway Debian sshd servers on 127.x addresses this module picks, for
  host-key changes the cluster cannot make; each is stopped at the end of the test.
* ``cli(name, *args)``: runs a console script of this venv as a real process.
* ``sync(ssh_dir, src, dest, *hosts_and_flags)``: dataset-sync with the bootstrap's ssh_config
  (process, JSON report); ``hosts_by_name(report)`` its per-host entries.
* ``make_dataset(root)`` builds a small test tree; ``assert_host_has(cluster, pod, dest, src)``
  checks a pod's copy over SSH (``sha256sum -c``, no extra files, symlinks, the manifest).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from elastic.sync.manifest import MANIFEST_NAME, Manifest, build_manifest
from tests.waiting import wait_for  # noqa: F401 (the shared helper, imported from here by the tests)

BIN = Path(sys.executable).parent
WORKERS = ("worker-0", "worker-1", "worker-2")


def tool(name: str) -> str:
    """Path of a console script installed in this venv."""
    path = BIN / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run scripts/setup")
    return str(path)


def cli(name: str, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a console script; text output."""
    return subprocess.run([tool(name), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def private_cache(tmp_path: Path, env: dict | None = None) -> dict:
    """An environment whose XDG_CACHE_HOME (dataset-sync's hash cache) is under ``tmp_path``."""
    return dict(env if env is not None else os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg-cache"))


@pytest.fixture(scope="module")
def sync_cluster(tmp_path_factory):
    from localcluster.testing import running_cluster

    with running_cluster(tmp_path_factory.mktemp("cluster"), workers=len(WORKERS)) as handle:
        yield handle


@pytest.fixture(scope="module")
def pod_ips(sync_cluster) -> dict[str, str]:
    return {name: sync_cluster.wait_ready(name) for name in WORKERS}


@pytest.fixture(scope="module")
def ssh_dir(sync_cluster, pod_ips, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ssh")
    proc = cli("ssh-bootstrap", "hosts", "--identity", str(sync_cluster.identity), "--out", str(out),
               "--port", str(sync_cluster.ssh_port), "--hosts", ",".join(pod_ips.values()))
    assert proc.returncode == 0, proc.stderr
    return out


@dataclass
class Sshd:
    """A throwaway sshd: ``address``, ``port``, ``identity`` (accepted client key)."""

    address: str
    port: int
    identity: Path
    config: Path
    proc: subprocess.Popen | None = None

    def start(self, host_key: Path) -> None:
        text = self.config.read_text() if self.config.exists() else ""
        lines = [line for line in text.splitlines() if not line.startswith("HostKey ")]
        self.config.write_text("\n".join(lines + [f"HostKey {host_key}"]) + "\n")
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(self.config)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # blocks until sshd listens or dies
        if "Server listening" not in line:
            self.stop()
            raise RuntimeError(f"sshd did not start: {line.strip()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _free_address() -> tuple[str, int]:
    base = 200 + os.getpid() % 50
    for third in range(1, 255):
        address = f"127.{base}.{third}.1"
        with socket.socket() as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            return address, sock.getsockname()[1]
    raise RuntimeError("no free loopback address")


@pytest.fixture
def sshd_factory(tmp_path):
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ssh") is None:
        pytest.fail("openssh-server and openssh-client are required")
    Path("/run/sshd").mkdir(exist_ok=True)
    started: list[Sshd] = []

    def make(name: str = "sshd") -> Sshd:
        root = tmp_path / name
        root.mkdir()
        identity = keygen(root / "client_key")
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        address, port = _free_address()
        config = root / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {address}:{port}", f"AuthorizedKeysFile {root}/authorized_keys", "UsePAM no",
            "StrictModes no", "PermitRootLogin prohibit-password", "PasswordAuthentication no", "PidFile none",
        ]) + "\n")
        server = Sshd(address, port, identity, config)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def make_dataset(root: Path, small: int = 120, big_mib: int = 3) -> Path:
    """Nested small files, one bigger file, an empty directory and an internal symlink."""
    for i in range(small):
        d = root / f"class{i % 6:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"img{i:04d}.bin").write_bytes(hashlib.sha256(str(i).encode()).digest() * (1 + i % 40))
    (root / "big.bin").write_bytes(os.urandom(big_mib * 2**20))
    (root / "empty").mkdir()
    (root / "latest").symlink_to("class00/img0000.bin")
    return root


def expected_sums(src: Path) -> str:
    """``sha256sum -c`` input for every regular file of ``src``."""
    m = build_manifest(str(src))
    return "".join(f"{e.sha256}  {path}\n" for path, e in m.files.items())


def assert_host_has(cluster, pod: str, dest: str, src: Path) -> None:
    """Check the copy on the pod itself, over SSH: checksums, symlinks, no extra files, manifest."""
    sums = expected_sums(src)
    check = cluster.ssh(pod, f"cd {dest} && printf %s '{sums}' | sha256sum -c --quiet --strict - && "
                             f"find . -type f ! -name {MANIFEST_NAME} | wc -l && readlink latest && "
                             f"readlink {dest} && cat {MANIFEST_NAME}", timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    count, latest, version, manifest = check.stdout.split("\n", 3)
    assert int(count) == len(sums.splitlines())
    assert latest == os.readlink(src / "latest")
    assert version.startswith(f".{Path(dest).name}.dataset-sync/v-")
    assert Manifest.from_json(manifest).digest == build_manifest(str(src)).digest


@contextmanager
def rsync_hidden(cluster, pod: str, workdir: Path) -> Iterator[None]:
    """While open, ``pod`` has no rsync: its own mount namespace's ``/usr/bin`` is replaced by a
    copy of this machine's that lacks it (hard links where it can, so it costs no space), as on an image
    built without rsync; the pod's other programs, and every other pod, are untouched.
    Skips the test when the pods share this process's mount namespace (the local cluster
    without root runs them so: the mount would be this machine's)."""
    mine = os.readlink("/proc/self/ns/mnt")
    theirs = cluster.ssh(pod, "readlink /proc/self/ns/mnt", timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    if theirs.stdout.strip() == mine:
        pytest.skip("the local cluster's pods share this mount namespace (no root): cannot take rsync from one")
    usr_bin = Path(os.path.realpath(shutil.which("rsync") or "/usr/bin/rsync")).parent
    bare = workdir / "bin-without-rsync"
    if subprocess.run(["cp", "-al", "--", str(usr_bin), str(bare)], capture_output=True).returncode != 0:
        shutil.rmtree(bare, ignore_errors=True)   # another filesystem: no hard links, a copy (~300 MB)
        subprocess.run(["cp", "-a", "--", str(usr_bin), str(bare)], check=True)
    (bare / "rsync").unlink()
    hide = cluster.ssh(pod, f"mount --bind -- {bare} {usr_bin} && ! command -v rsync", timeout=60)
    assert hide.returncode == 0, hide.stdout + hide.stderr
    try:
        yield
    finally:
        back = cluster.ssh(pod, f"umount --lazy -- {usr_bin} && command -v rsync", timeout=60)  # its shell runs from it
        assert back.returncode == 0, back.stdout + back.stderr


def pods_with_ssh(cluster, tmp_path: Path, names: list[str]) -> tuple[dict[str, str], Path]:
    """Create pods ``names`` on cluster, wait until they are ready and pin their host keys
    (``ssh-bootstrap hosts`` into ``tmp_path/ssh``): (name -> IP, the ssh directory)."""
    for n in names:
        cluster.create_pod(n)
    ips = {n: cluster.wait_ready(n, timeout=60) for n in names}
    ssh = tmp_path / "ssh"
    proc = cli("ssh-bootstrap", "hosts", "--identity", str(cluster.identity), "--out", str(ssh),
               "--port", str(cluster.ssh_port), "--hosts", ",".join(ips.values()))
    assert proc.returncode == 0, proc.stderr
    return ips, ssh


def sync(ssh_dir: Path, src: Path, dest: str, *hosts_and_flags: str, timeout: float = 180):
    """Run dataset-sync with the bootstrap's ssh_config; return (process, JSON report or None)."""
    report = src.parent / f"report-{os.urandom(4).hex()}.json"
    proc = cli("dataset-sync", str(src), dest, "--ssh-config", str(ssh_dir / "ssh_config"), "--report", str(report),
               "--retry-delay", "0.2", *hosts_and_flags, timeout=timeout, env=private_cache(src.parent))
    return proc, json.loads(report.read_text()) if report.exists() else None


def hosts_by_name(report) -> dict:
    """dataset-sync's JSON report: its per-host entries by host."""
    return {h["host"]: h for h in report["hosts"]}
