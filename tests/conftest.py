"""Shared fixtures. ``cluster``: a fresh local cluster (0 workers) per test, stopped afterwards."""
import pytest


@pytest.fixture
def cluster(tmp_path):
    from localcluster.testing import running_cluster

    with running_cluster(tmp_path / "cluster") as handle:
        yield handle
