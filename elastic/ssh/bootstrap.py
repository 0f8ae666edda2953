"""``ssh-bootstrap hosts`` as a service: pin host keys, write the SSH files, check every host.

``bootstrap_hosts(hosts, identity, out_dir, ...)`` blocks until every host was handled and
returns one ``HostResult`` per host (in input order); it raises ``ConfigError`` only for bad
input (missing identity, unwritable DIR, malformed ``pins.json``/``hostfile``).  Per host, in
parallel (``jobs`` at once):

1. read the host key with paramiko (``elastic.ssh.probe.fetch_host_key``); if the address already has a pin of that
   type, the host must present the pinned key -- a different key is refused (``CHANGED``) and the
   pin is kept.  The one exception: with ``repin_uid`` (``--repin-for-uid``; the discovery
   daemon's ``DISCOVERY_POD_UID``) different from the uid recorded for the address in
   ``DIR/pins.json`` (``elastic.ssh.pin_owners``), the API server says the address now belongs to a
   new pod, so its pins are replaced by the presented key (``repinned``); the uid is recorded;
2. new pins are added to ``DIR/known_hosts`` (existing pins are dropped only by a re-pin);
3. for the hosts with a good pin, run ``hostname`` through ``DIR/bin/ssh`` -- the same wrapper
   horovodrun will use -- so the table proves the exact path training takes.

``DIR/hostfile`` is merged (``hostlist.merge_hostfile``): the hosts of this call that passed
get their line, those that failed lose it, every other host's line stays -- so the discovery
daemon's prepare hook can add one host at a time.  ``replace_hostfile=True`` writes only this
call's good hosts.  Every read-modify-write of ``known_hosts``, ``pins.json`` and ``hostfile``
happens under an exclusive ``flock`` on ``DIR/.lock`` (held only around the file update, never
across the network), so concurrent calls on one DIR -- the daemon prepares several pods at
once -- never lose a pin or a hostfile line.  Callers must not hold that lock themselves.
(The default host list, from ``discover-hosts``, is ``elastic.common.hostsource.discover_hosts``.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from elastic.common.hostlist import Host, merge_hostfile, parse_hosts_file, render_hostfile, validate_host_name
from elastic.common.table import render_table
from elastic.errors import ConfigError, SSHError
from elastic.ssh.config import BootstrapDir, render_settings, render_ssh_config, render_ssh_wrapper
from elastic.ssh.exec import SSHClient
from elastic.ssh.known_hosts import KnownHosts, PinResult, host_key_name, mismatch_error, pin, repin
from elastic.ssh.pin_owners import is_new_incarnation, parse_pin_owners, render_pin_owners
from elastic.ssh.probe import fetch_host_key
from shared.atomicfile import write_atomic

_write_lock = threading.Lock()
LOCK_NAME = ".lock"
PINS_NAME = "pins.json"


@contextlib.contextmanager
def ssh_dir_lock(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the exclusive lock on ``DIR/.lock`` (blocks), across threads and processes.

    Not reentrant: a second ``flock`` on another descriptor of the same file would wait for
    the first forever, so nothing here nests it and callers of ``bootstrap_hosts`` must not
    hold it."""
    root = Path(out_dir)
    with _write_lock:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot lock {root / LOCK_NAME}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _write(path: Path, text: str) -> None:
    try:
        write_atomic(path, text, 0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class HostResult:
    """The outcome for one host; ``ok`` when its key is pinned and ssh ran a command on it."""

    host: str
    slots: int
    key_type: str = ""
    fingerprint: str = ""
    pin: str = "-"  # new | same | repinned | CHANGED | -
    ssh: str = "-"  # ok | failed | -
    remote_hostname: str = ""
    millis: float | None = None
    error: str = ""
    previous_fingerprint: str = ""  # the replaced pin's, when ``pin == "repinned"``

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
        wrapper = render_ssh_wrapper(_real_ssh(d.bin_dir), str(d.ssh_config), str(d.known_hosts))
        write_atomic(d.ssh_wrapper, wrapper, 0o755)
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


def _pin_one(d: BootstrapDir, name: str, key_type: str, key_b64: str, repin_uid: str | None) -> PinResult:
    """Decide and record one presented key under ``DIR/.lock`` (see the module docstring)."""
    pins_path = d.root / PINS_NAME
    with ssh_dir_lock(d.root):
        known = KnownHosts.parse(_read(d.known_hosts))
        owners = parse_pin_owners(_read(pins_path), str(pins_path))
        if is_new_incarnation(owners.get(name), repin_uid):
            result = repin(known, name, key_type, key_b64)
        else:
            result = pin(known, name, key_type, key_b64)
        if result.status in ("new", "repinned"):
            _write(d.known_hosts, result.known_hosts.render())
        updated = dict(owners)
        if repin_uid and result.status != "changed":
            updated[name] = repin_uid
        elif result.status == "new":
            updated.pop(name, None)  # a record left by a pin removed by hand
        if updated != owners:
            _write(pins_path, render_pin_owners(updated))
    return result


def _existing_hosts(d: BootstrapDir) -> list[Host]:
    try:
        return parse_hosts_file(_read(d.hostfile))
    except ConfigError as exc:
        raise ConfigError(f"{d.hostfile}: {exc} (fix or remove the file)") from None


def _merge_hostfile(d: BootstrapDir, results: list[HostResult], replace_all: bool) -> None:
    good = [Host(r.host, r.slots) for r in results if r.ok]
    with ssh_dir_lock(d.root):
        existing = [] if replace_all else _existing_hosts(d)
        _write(d.hostfile, render_hostfile(merge_hostfile(existing, [r.host for r in results], good)))


def bootstrap_hosts(hosts: list[Host], identity: str, out_dir: str | os.PathLike, *, port: int = 2222,
                    user: str = "root", jobs: int = 16, timeout: float = 10.0,
                    write_hostfile: bool = True, repin_uid: str | None = None,
                    replace_hostfile: bool = False) -> list[HostResult]:
    """Pin, configure and check ``hosts`` (see the module docstring); blocks; returns results.

    ``repin_uid`` names the pod incarnation of the single host given; ConfigError otherwise."""
    if not hosts:
        raise ConfigError("no hosts to bootstrap")
    for h in hosts:  # again here: no caller's check is trusted (a host is pod-controlled)
        validate_host_name(h.name)
    if not 0 < port < 65536:
        raise ConfigError(f"bad SSH port {port}")
    if repin_uid is not None and (len(hosts) != 1 or not repin_uid.strip()):
        raise ConfigError("--repin-for-uid names one pod: give exactly one host and a non-empty uid")
    d = BootstrapDir(out_dir)
    identity = _check_identity(identity)
    with ssh_dir_lock(d.root):
        write_ssh_files(d, identity, port, user, int(max(1, timeout)))
        parse_pin_owners(_read(d.root / PINS_NAME), str(d.root / PINS_NAME))  # bad file: fail early
        if write_hostfile and not replace_hostfile:
            _existing_hosts(d)

    def fetch(host: Host) -> HostResult:
        name = host_key_name(host.name, port)
        with ssh_dir_lock(d.root):
            pinned_types = tuple(KnownHosts.parse(_read(d.known_hosts)).keys_for(name))
            owners = parse_pin_owners(_read(d.root / PINS_NAME), str(d.root / PINS_NAME))
        if is_new_incarnation(owners.get(name), repin_uid):
            pinned_types = ()  # a new pod: whatever key types it has
        try:
            key_type, key_b64 = fetch_host_key(host.name, port, timeout, pinned_types or None)
        except SSHError as exc:
            return HostResult(host.name, host.slots, error=str(exc))
        result = _pin_one(d, name, key_type, key_b64, repin_uid)
        if result.status == "changed":
            return HostResult(host.name, host.slots, key_type, result.fingerprint, "CHANGED",
                              error=str(mismatch_error(name, result, str(d.known_hosts))))
        previous = result.pinned_fingerprint if result.status == "repinned" else ""
        return HostResult(host.name, host.slots, key_type, result.fingerprint, result.status,
                          previous_fingerprint=previous)

    def check(result: HostResult) -> HostResult:
        if result.pin not in ("new", "same", "repinned"):
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
        _merge_hostfile(d, results, replace_hostfile)
    return results
