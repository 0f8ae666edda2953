"""What a test module leaves behind once its fixtures are torn down: processes, listening
ports and mounts (tests/conftest.py fails the module's last test on any, then clears them).

- processes: every live process carrying this session's tag (tests/processes.py), with the
  TCP ports each listens on;
- ports: TCP ports this pytest process itself listens on that it did not before the module
  (a server thread a test forgot to stop);
- mounts: mount points under this session's temporary directory (the local cluster's pods
  mount in namespaces of their own, so any mount seen here escaped one).

Each is read from /proc, and only what this process or the processes it tagged own, so a
parallel run's other workers (other processes, other tags, other temporary directories) never
count.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tests.processes import SESSION_ENV, SESSION_TAG, _zombie, pids_with


@dataclass(frozen=True)
class Snapshot:
    """What this process owns at one moment: its listening ports and mount points."""
    ports: frozenset[str]
    mounts: frozenset[str]


def listening() -> dict[int, str]:
    """Listening TCP sockets of this network namespace: socket inode -> ``address:port``."""
    found: dict[int, str] = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":  # LISTEN
                address, port = fields[1].rsplit(":", 1)
                if len(address) == 8:  # IPv4, as a little-endian word
                    address = ".".join(str(b) for b in reversed(bytes.fromhex(address)))
                found[int(fields[9])] = f"{address}:{int(port, 16)}"
    return found


def sockets_of(pid: int | str) -> set[int]:
    """The socket inodes process ``pid`` holds open (none when it is gone)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def ports_of(pid: int | str, table: dict[int, str] | None = None) -> list[str]:
    """The ``address:port`` pairs process ``pid`` listens on."""
    table = listening() if table is None else table
    return sorted(table[i] for i in sockets_of(pid) if i in table)


def mounts_under(root: Path) -> frozenset[str]:
    """Mount points of this mount namespace at or below ``root``."""
    prefix = str(root).rstrip("/")
    points = set()
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                points.add(point)
    return frozenset(points)


def snapshot(temp_root: Path) -> Snapshot:
    return Snapshot(frozenset(ports_of("self")), mounts_under(temp_root))


# multiprocessing's helpers of this interpreter (a DataLoader's forkserver start method starts
# them once): they serve every later test of the process and end with it, so they are no leak
INTERPRETER_HELPERS = (b"from multiprocessing.forkserver import main",
                       b"from multiprocessing.resource_tracker import main")


def tagged_alive() -> list[int]:
    """Live processes carrying this session's tag, but this interpreter's own multiprocessing
    helpers."""
    return [p for p in pids_with(SESSION_ENV, SESSION_TAG) if not _zombie(p) and not _interpreter_helper(p)]


def _interpreter_helper(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return ppid == os.getpid() and any(h in cmdline for h in INTERPRETER_HELPERS)


def describe(pid: int, table: dict[int, str]) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    ports = ports_of(pid, table)
    return f"pid {pid} ({cmd[:120]})" + (f" listening on {', '.join(ports)}" if ports else "")


def left_behind(before: Snapshot, temp_root: Path, settle: float = 10.0) -> list[str]:
    """What is left now that was not at ``before``, one line each; processes and ports are
    given ``settle`` seconds to go first (a teardown's SIGTERM lands a moment later)."""
    deadline = time.monotonic() + settle
    while True:
        pids = tagged_alive()
        now = snapshot(temp_root)
        ports = now.ports - before.ports
        mounts = now.mounts - before.mounts
        if not (pids or ports or mounts) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    table = listening()
    return ([f"process {describe(p, table)}" for p in pids]
            + [f"port {p} still listened on by the test process" for p in sorted(ports)]
            + [f"mount {m}" for m in sorted(mounts)])
