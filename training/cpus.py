"""How many CPU threads a worker should use: its share of the cores it may actually run on.

A pod sees every core of its node in ``os.cpu_count()``; what it may use is its CPU affinity
and, under a Kubernetes CPU limit, the cgroup quota (``/sys/fs/cgroup/cpu.max``:
``"<quota> <period>"`` or ``"max <period>"``). ``threads_per_worker`` divides the smaller of
the two among the workers of the host (at least one thread each).
"""

from __future__ import annotations

import math
import os


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


def cgroup_cpu_limit(path: str = "/sys/fs/cgroup/cpu.max") -> float | None:
    """The cgroup v2 CPU limit of this process, None when there is none or it cannot be read."""
    try:
        with open(path) as f:
            return parse_cpu_max(f.read())
    except OSError:
        return None
