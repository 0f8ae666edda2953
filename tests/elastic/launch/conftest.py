"""Fixtures and helpers for the elastic-run tests that run real jobs.

``two_pods``: a local cluster with two worker pods, shared by a test module (the tests of one
module run their jobs on it one after the other). ``env()``: this venv's environment for
elastic-run, without the DISCOVERY_* and ELASTIC_DATASET variables a caller may have set.
``launcher_args(cluster, tmp_path, *extra)``: elastic-run's argv for ``cluster``'s pods, up
to the training command.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from localcluster.testing import running_cluster

BIN = Path(sys.executable).parent
ELASTIC_RUN = str(BIN / "elastic-run")
SELECTOR = "app=elastic-horovod,role=worker"


def env() -> dict:
    """See the module docstring."""
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET"):
        e.pop(name, None)
    return e


def launcher_args(c, tmp_path: Path, *extra: str) -> list[str]:
    return [ELASTIC_RUN, "--selector", SELECTOR, "--kubeconfig", str(c.kubeconfig),
            "--ssh-port", str(c.ssh_port), "--ssh-identity-file", str(c.identity),
            "--network-interface", "lo", "--min-np", "2", "--max-np", "2", "--elastic-timeout", "60",
            "--timeline-file", str(tmp_path / "timeline.json"), *extra]


@pytest.fixture(scope="module")
def two_pods(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("run-cli") / "cluster", workers=2) as c:
        yield c
