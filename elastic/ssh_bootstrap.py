"""``ssh-bootstrap hosts`` as a service: pin host keys, write the SSH files, check every host.

``bootstrap_hosts(hosts, identity, out_dir, ...)`` blocks until every host was handled and
returns one ``HostResult`` per host (in input order); it raises ``ConfigError`` only for bad
input (missing identity, unwritable DIR).  Per host, in parallel (``jobs`` at once):

1. read the host key with paramiko (``ssh_probe``); if the address already has a pin of that
   type, the host must present the pinned key -- a different key is refused (``CHANGED``) and the
   pin is kept;
2. new pins are added to ``DIR/known_hosts`` (existing pins are never dropped);
3. for the hosts with a good pin, run ``hostname`` through ``DIR/bin/ssh`` -- the same wrapper
   horovodrun will use -- so the table proves the exact path training takes.

``DIR/hostfile`` lists the hosts that passed.  (The default host list, from ``discover-hosts``,
is ``elastic.hostsource.discover_hosts``.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from elastic.atomicfile import write_atomic
from elastic.errors import ConfigError, SSHError
from elastic.hostlist import Host, render_hostfile
from elastic.known_hosts import KnownHosts, host_key_name, mismatch_error, pin
from elastic.ssh_config import BootstrapDir, render_settings, render_ssh_config, render_ssh_wrapper
from elastic.ssh_exec import SSHClient
from elastic.ssh_probe import fetch_host_key
from elastic.table import render_table

_write_lock = threading.Lock()


@contextlib.contextmanager
def _known_hosts_lock(d: BootstrapDir) -> Iterator[None]:
    """Serialise known_hosts read-modify-write across threads and processes
    (``DIR/known_hosts.lock``; callers may hold their own lock on other files in DIR)."""
    with _write_lock:
        fd = os.open(d.root / "known_hosts.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


@dataclass(frozen=True)
class HostResult:
    """The outcome for one host; ``ok`` when its key is pinned and ssh ran a command on it."""

    host: str
    slots: int
    key_type: str = ""
    fingerprint: str = ""
    pin: str = "-"  # new | same | CHANGED | -
    ssh: str = "-"  # ok | failed | -
    remote_hostname: str = ""
    millis: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.ssh == "ok"


def render_results(results: list[HostResult]) -> str:
    """The per-host table printed by ``ssh-bootstrap hosts``."""
    rows = [
        [r.host, r.slots, r.fingerprint or "-", r.pin, r.ssh, r.remote_hostname or "-",
         f"{r.millis:.0f}" if r.millis is not None else "-", r.error or ""]
        for r in results
    ]
    return render_table(["HOST", "SLOTS", "HOST KEY", "PIN", "SSH", "HOSTNAME", "MS", "ERROR"], rows)


def _real_ssh(exclude: Path) -> str:
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if directory and Path(directory).absolute() == exclude:
            continue
        candidate = shutil.which("ssh", path=directory)
        if candidate:
            return str(Path(candidate).absolute())
    raise ConfigError("no ssh client on PATH (install openssh-client)")


def write_ssh_files(d: BootstrapDir, identity: str, port: int, user: str, connect_timeout: int = 10) -> None:
    """Write ``ssh_config``, ``bin/ssh`` and ``bootstrap.json`` (atomically); create an empty
    ``known_hosts`` if there is none."""
    try:
        d.bin_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(d.ssh_config, render_ssh_config(identity, str(d.known_hosts), port, user, connect_timeout))
        write_atomic(d.ssh_wrapper, render_ssh_wrapper(_real_ssh(d.bin_dir), str(d.ssh_config), str(d.known_hosts)), 0o755)
        write_atomic(d.settings, render_settings(identity, port, user))
        if not d.known_hosts.exists():
            write_atomic(d.known_hosts, "", 0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write SSH files to {d.root}: {exc.strerror or exc}") from exc


def _check_identity(identity: str) -> str:
    path = Path(identity).absolute()
    if not path.is_file():
        raise ConfigError(f"identity file {identity} does not exist")
    try:
        path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read identity file {identity}: {exc.strerror}") from exc
    return str(path)


def bootstrap_hosts(hosts: list[Host], identity: str, out_dir: str | os.PathLike, *, port: int = 2222,
                    user: str = "root", jobs: int = 16, timeout: float = 10.0,
                    write_hostfile: bool = True) -> list[HostResult]:
    """Pin, configure and check ``hosts`` (see the module docstring); blocks; returns results."""
    if not hosts:
        raise ConfigError("no hosts to bootstrap")
    if not 0 < port < 65536:
        raise ConfigError(f"bad SSH port {port}")
    d = BootstrapDir(out_dir)
    identity = _check_identity(identity)
    write_ssh_files(d, identity, port, user, int(max(1, timeout)))

    def fetch(host: Host) -> HostResult:
        name = host_key_name(host.name, port)
        with _known_hosts_lock(d):
            pinned_types = tuple(KnownHosts.parse(d.known_hosts.read_text()).keys_for(name))
        try:
            key_type, key_b64 = fetch_host_key(host.name, port, timeout, pinned_types or None)
        except SSHError as exc:
            return HostResult(host.name, host.slots, error=str(exc))
        with _known_hosts_lock(d):  # read-modify-write of known_hosts, one host at a time
            known = KnownHosts.parse(d.known_hosts.read_text())
            result = pin(known, name, key_type, key_b64)
            if result.status == "new":
                write_atomic(d.known_hosts, result.known_hosts.render(), 0o644)
        if result.status == "changed":
            return HostResult(host.name, host.slots, key_type, result.fingerprint, "CHANGED",
                              error=str(mismatch_error(name, result, str(d.known_hosts))))
        return HostResult(host.name, host.slots, key_type, result.fingerprint, result.status)

    def check(result: HostResult) -> HostResult:
        if result.pin not in ("new", "same"):
            return result
        client = SSHClient(config=None, ssh=str(d.ssh_wrapper), connect_timeout=int(max(1, timeout)))
        started = time.monotonic()
        try:
            proc = client.run(result.host, "hostname", timeout=timeout + 20)
        except SSHError as exc:
            return replace(result, ssh="failed", error=str(exc))
        millis = (time.monotonic() - started) * 1000
        if proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            return replace(result, ssh="failed", millis=millis,
                           error=f"{result.host}: 'hostname' exited {proc.returncode}: {(detail or [''])[-1]}")
        return replace(result, ssh="ok", millis=millis, remote_hostname=proc.stdout.decode("utf-8", "replace").strip())

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(hosts)))) as pool:
        results = list(pool.map(lambda h: check(fetch(h)), hosts))
    if write_hostfile:
        try:
            write_atomic(d.hostfile, render_hostfile([Host(r.host, r.slots) for r in results if r.ok]))
        except OSError as exc:
            raise ConfigError(f"cannot write {d.hostfile}: {exc.strerror or exc}") from exc
    return results
