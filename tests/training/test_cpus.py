"""Threads per worker from the usable cores and a Kubernetes CPU limit."""

import pytest

from training.cpus import cgroup_cpu_limit, parse_cpu_max, threads_per_worker


@pytest.mark.parametrize("text, cpus", [
    ("max 100000\n", None), ("200000 100000\n", 2.0), ("50000 100000", 0.5),
    ("", None), ("garbage", None), ("x 100000", None), ("0 100000", None),
])
def test_parse_cpu_max(text, cpus):
    assert parse_cpu_max(text) == cpus


@pytest.mark.parametrize("workers, usable, limit, threads", [
    (1, 8, None, 8), (2, 8, None, 4), (3, 8, None, 2), (4, 2, None, 1),
    (1, 64, 4.0, 4), (1, 64, 0.5, 1), (2, 64, 3.5, 2), (1, 2, 16.0, 2),
])
def test_threads_per_worker(workers, usable, limit, threads):
    assert threads_per_worker(workers, usable, limit) == threads


def test_cgroup_limit_from_a_file(tmp_path):
    f = tmp_path / "cpu.max"
    f.write_text("300000 100000\n")
    assert cgroup_cpu_limit(str(f)) == 3.0
    assert cgroup_cpu_limit(str(tmp_path / "missing")) is None
