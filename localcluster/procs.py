"""Finding and signalling the processes of one pod (reads /proc; no other state).

- ``all_pids()`` -> every pid on the machine (from /proc).
- ``namespace_of(pid)`` -> the pid-namespace id (``pid:[inode]``) of a process, or None.
- ``in_namespace(ns)`` -> pids of every process in that pid namespace (exact: what a pod runs).
- ``descendants(pid)`` -> pids of every process below ``pid`` (used without namespaces).
- ``first_child(pid)`` -> a child of ``pid`` (unshare's forked child is the pod's init).
- ``signal_all(pids, sig)`` sends ``sig`` to each, ignoring those already gone.
"""
from __future__ import annotations

import os


def namespace_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def hold_namespace(pid: int) -> tuple[int, str] | None:
    """Open ``pid``'s pid namespace: returns the open descriptor and the namespace's name
    (as ``namespace_of`` spells it), or None when ``pid`` is gone. While the descriptor is
    open the namespace stays allocated, so its name cannot be given to a new namespace (the
    kernel reuses a freed one's number at once). The caller closes it."""
    try:
        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    return fd, f"pid:[{os.fstat(fd).st_ino}]"


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def in_namespace(ns: str) -> list[int]:
    """Live (non-zombie) processes whose pid namespace is ``ns``."""
    return [p for p in all_pids() if namespace_of(p) == ns and not _is_zombie(p)]


def _ppid_map() -> dict[int, int]:
    out = {}
    for p in all_pids():
        try:
            with open(f"/proc/{p}/stat", "rb") as fh:
                out[p] = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (not ``pid`` itself)."""
    children: dict[int, list[int]] = {}
    for p, pp in _ppid_map().items():
        children.setdefault(pp, []).append(p)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if not _is_zombie(p):
            out.append(p)
        todo.extend(children.get(p, []))
    return out


def first_child(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = fh.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def signal_all(pids, sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass
