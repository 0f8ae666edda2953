"""How many CPU threads a worker should use: its share of the cores it may actually run on.

A pod sees every core of its node in ``os.cpu_count()``; what it may use is its CPU affinity
and, under a Kubernetes CPU limit, the cgroup quota. ``threads_per_worker`` divides the
smaller of the two among the workers of the host (at least one thread each).

``cgroup_cpu_limit`` reads the quota of both cgroup versions:

- v2 (unified): ``cpu.max``, ``"<quota> <period>"`` or ``"max <period>"``;
- v1 (EKS AL2 GPU AMIs and other older nodes): the ``cpu`` controller's
  ``cpu.cfs_quota_us`` (``-1``: none) and ``cpu.cfs_period_us``, in a hierarchy mounted at
  ``<root>/cpu`` (or ``cpu,cpuacct``, ``cpuacct,cpu``).

Inside a container the hierarchy usually shows the container's own cgroup at its mount point;
on a node without cgroup namespaces it shows the whole tree, and the process's cgroup is the
path ``/proc/self/cgroup`` names. So each version's directories are read from the process's
cgroup up to the mount point (those that exist), and the smallest limit found wins: a limit
on a parent cgroup (the pod's) binds its children too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` line, None for no limit or an unreadable line."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` contents,
    None for no limit (a quota of -1) or unreadable values."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}: each v1 hierarchy's controllers (``cpu``,
    ``cpuacct``, ``name=systemd``...) map to its path; the v2 line (``0::/path``) is key ``""``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2].strip() or "/"
    return paths


def _upwards(mount: Path, path: str) -> list[Path]:
    """``mount`` joined with ``path`` and each of its parents, up to ``mount`` itself."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
                     ) -> float | None:
    """The CPU limit of this process from the cgroup file system at ``root`` (v2 and v1, see
    the module's docstring), the smallest of those found; None when there is none or nothing
    can be read. ``proc_cgroup`` is the file naming the process's cgroups (tests pass a fake
    tree and file)."""
    base = Path(root)
    own = parse_proc_cgroup(_read(Path(proc_cgroup)) or "")
    limits: list[float] = []
    for d in _upwards(base, own.get("", "/")):
        text = _read(d / "cpu.max")
        limit = parse_cpu_max(text) if text is not None else None
        if limit is not None:
            limits.append(limit)
    for name in V1_CPU_DIRS:
        mount = base / name
        if not mount.is_dir():  # ("cpu" is often a symlink to "cpu,cpuacct": the same)
            continue
        for d in _upwards(mount, own.get("cpu", "/")):
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            limit = parse_cfs(quota, period) if quota is not None and period is not None else None
            if limit is not None:
                limits.append(limit)
        break  # one hierarchy holds the cpu controller
    return min(limits) if limits else None


def threads_per_worker(workers_on_host: int, usable_cpus: int, cpu_limit: float | None) -> int:
    """Threads for one of ``workers_on_host`` workers sharing ``usable_cpus`` (and a limit)."""
    cpus = usable_cpus if cpu_limit is None else min(usable_cpus, max(1, math.ceil(cpu_limit)))
    return max(1, cpus // max(1, workers_on_host))


def usable_cpus() -> int:
    """Cores this process may run on (its affinity), else ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
