"""Threads per worker from the usable cores and a Kubernetes CPU limit (cgroup v2 and v1,
read from fake cgroup trees, not the machine's)."""

from pathlib import Path

import pytest

from training.cpus import (
    cgroup_cpu_limit,
    parse_cfs,
    parse_cpu_max,
    parse_proc_cgroup,
    threads_per_worker,
)
from training.loaders import default_workers


@pytest.mark.parametrize("text, cpus", [
    ("max 100000\n", None), ("200000 100000\n", 2.0), ("50000 100000", 0.5),
    ("", None), ("garbage", None), ("x 100000", None), ("0 100000", None),
])
def test_parse_cpu_max(text, cpus):
    assert parse_cpu_max(text) == cpus


@pytest.mark.parametrize("quota, period, cpus", [
    ("-1\n", "100000\n", None), ("600000\n", "100000\n", 6.0), ("150000", "100000", 1.5),
    ("", "100000", None), ("x", "100000", None), ("600000", "0", None),
])
def test_parse_cfs(quota, period, cpus):
    assert parse_cfs(quota, period) == cpus


@pytest.mark.parametrize("workers, usable, limit, threads", [
    (1, 8, None, 8), (2, 8, None, 4), (3, 8, None, 2), (4, 2, None, 1),
    (1, 64, 4.0, 4), (1, 64, 0.5, 1), (2, 64, 3.5, 2), (1, 2, 16.0, 2),
])
def test_threads_per_worker(workers, usable, limit, threads):
    assert threads_per_worker(workers, usable, limit) == threads


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v1_dir(d: Path, quota: int, period: int = 100000) -> None:
    write(d / "cpu.cfs_quota_us", f"{quota}\n")
    write(d / "cpu.cfs_period_us", f"{period}\n")


V1_PROC = ("12:pids:/kubepods/burstable/pod1/ctr\n"
           "4:cpu,cpuacct:/kubepods/burstable/pod1/ctr\n"
           "1:name=systemd:/kubepods/burstable/pod1/ctr\n")


def test_parse_proc_cgroup():
    paths = parse_proc_cgroup(V1_PROC + "0::/\n")
    assert paths["cpu"] == paths["cpuacct"] == "/kubepods/burstable/pod1/ctr"
    assert paths[""] == "/" and paths["name=systemd"] == "/kubepods/burstable/pod1/ctr"


def test_cgroup_v2_limit_from_a_fake_tree(tmp_path):
    write(tmp_path / "cpu.max", "300000 100000\n")
    write(tmp_path / "self", "0::/\n")
    assert cgroup_cpu_limit(str(tmp_path), str(tmp_path / "self")) == 3.0
    assert cgroup_cpu_limit(str(tmp_path / "missing"), str(tmp_path / "missing")) is None


def test_cgroup_v1_in_a_container(tmp_path):
    """EKS AL2: the container's own cgroup mounted at /sys/fs/cgroup/cpu,cpuacct (and cpu, a
    symlink to it); /proc/self/cgroup names the host's path, which is not in the mount."""
    root = tmp_path / "cgroup"
    v1_dir(root / "cpu,cpuacct", 600000)
    (root / "cpu").symlink_to("cpu,cpuacct")
    write(root / "unified" / "cgroup.procs", "")  # a hybrid node: v2 without the cpu controller
    write(tmp_path / "self", V1_PROC + "0::/\n")
    assert cgroup_cpu_limit(str(root), str(tmp_path / "self")) == 6.0


def test_cgroup_v1_whole_tree_the_smallest_limit_on_the_path_wins(tmp_path):
    """No cgroup namespace: the whole hierarchy is visible; the container's cgroup is found
    by its path, and a tighter limit on its pod binds it too."""
    root = tmp_path / "cgroup"
    v1_dir(root / "cpu", -1)  # the root cgroup: no limit
    v1_dir(root / "cpu" / "kubepods", -1)
    v1_dir(root / "cpu" / "kubepods" / "burstable" / "pod1", 400000)
    v1_dir(root / "cpu" / "kubepods" / "burstable" / "pod1" / "ctr", 600000)
    v1_dir(root / "cpu" / "kubepods" / "burstable" / "pod2", 100000)  # another pod's
    write(tmp_path / "self", V1_PROC)
    assert cgroup_cpu_limit(str(root), str(tmp_path / "self")) == 4.0


def test_cgroup_v1_without_a_limit(tmp_path):
    root = tmp_path / "cgroup"
    v1_dir(root / "cpu", -1)
    write(tmp_path / "self", V1_PROC)
    assert cgroup_cpu_limit(str(root), str(tmp_path / "self")) is None


def test_a_6_cpu_pod_on_a_96_cpu_v1_node_starts_5_loading_processes(tmp_path):
    """The issue's case: without the v1 limit the GPU path started 95 loading processes."""
    root = tmp_path / "cgroup"
    v1_dir(root / "cpu,cpuacct", 600000)
    write(tmp_path / "self", V1_PROC)
    limit = cgroup_cpu_limit(str(root), str(tmp_path / "self"))
    assert default_workers(True, 1, 96, limit) == 5
