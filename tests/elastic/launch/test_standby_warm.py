"""A standby launcher warms dataset-sync's hash cache (``elastic.launch.warming``,
``python -m elastic.sync.warm``): while another launcher holds the job's Lease, ``elastic-run
--leader-election --dataset SRC:DEST`` hashes SRC into the cache its first dataset-sync will
read, and ends that work when it is stopped. Against a local cluster's real Lease API."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kubernetes import client, config

from elastic.sync import warm
from elastic.sync.manifest import cache_path, load_cache
from localcluster.testing import running_cluster
from tests.runtime.liveness import pid_gone
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _dataset(root: Path, files: int) -> Path:
    src = root / "src"
    (src / "train").mkdir(parents=True)
    for i in range(files):
        (src / "train" / f"{i}.bin").write_bytes(os.urandom(2048))
    return src


def _hold_lease(kubeconfig: Path, name: str, holder: str) -> None:
    api = client.CoordinationV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    now = datetime.now(timezone.utc)
    api.create_namespaced_lease("default", client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=600, lease_transitions=0,
                                acquire_time=now, renew_time=now)))


def _warm_pids(src: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"elastic.sync.warm" in argv and str(src).encode() in argv:
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(300)
def test_a_standby_hashes_its_dataset_while_another_launcher_leads(tmp_path, monkeypatch):
    src = _dataset(tmp_path, 40)
    xdg = tmp_path / "xdg"
    with running_cluster(tmp_path / "cluster") as cluster:
        _hold_lease(cluster.kubeconfig, "elastic-run-warm-job", "the-leader")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCOVERY_", "ELASTIC_"))}
        env.update(XDG_CACHE_HOME=str(xdg), PATH=f"{BIN}:{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
        log_path = tmp_path / "standby.log"
        with open(log_path, "wb") as log:
            standby = subprocess.Popen(
                [str(BIN / "elastic-run"), "--selector", "app=none", "--kubeconfig", str(cluster.kubeconfig),
                 "--job-id", "warm-job", "--leader-election", "--leader-identity", "standby",
                 "--dataset", f"{src}:/data/warm", "--", "python", "-c", "pass"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)
        try:
            wait_for(lambda: "warm: 40 files, 40 hashed, 0 from the cache" in log_path.read_text(), 120,
                     "the standby to hash its dataset", detail=lambda: log_path.read_text()[-3000:])
            cached = load_cache(cache_path(str(src.resolve()), str(xdg / "elastic-horovod" / "dataset-sync")),
                                str(src.resolve()))
            assert sorted(cached) == sorted(f"train/{i}.bin" for i in range(40))
            assert standby.poll() is None, "the standby ended instead of standing by"
            assert "leading job" not in log_path.read_text()
            # the next dataset-sync (here: a second warm, the same cache) hashes nothing
            monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
            assert warm.warm(str(src), "refuse").startswith("warm: 40 files, 0 hashed, 40 from the cache")
        finally:
            if standby.poll() is None:
                os.killpg(standby.pid, signal.SIGTERM)
            standby.wait(60)


@pytest.mark.timeout(300)
def test_a_standby_stopped_while_it_hashes_ends_the_hashing(tmp_path):
    """SIGTERM to a standby whose warm still runs (a dataset large enough to take a while):
    the standby exits and leaves no warm behind."""
    src = _dataset(tmp_path, 4)
    (src / "big.bin").write_bytes(b"\0" * (1 << 30))  # a 1 GiB file: seconds of hashing
    with running_cluster(tmp_path / "cluster") as cluster:
        _hold_lease(cluster.kubeconfig, "elastic-run-warm-job", "the-leader")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCOVERY_", "ELASTIC_"))}
        env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PATH=f"{BIN}:{env.get('PATH', '')}")
        standby = subprocess.Popen(
            [str(BIN / "elastic-run"), "--selector", "app=none", "--kubeconfig", str(cluster.kubeconfig),
             "--job-id", "warm-job", "--leader-election", "--leader-identity", "standby",
             "--dataset", f"{src}:/data/warm", "--", "python", "-c", "pass"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True)
        try:
            warms = wait_for(lambda: _warm_pids(src), 120, "the standby's warm to start")
            os.kill(standby.pid, signal.SIGTERM)
            standby.wait(60)
            wait_for(lambda: all(pid_gone(pid) for pid in warms), 30, "the warm to end with its standby")
        finally:
            if standby.poll() is None:
                os.killpg(standby.pid, signal.SIGKILL)
                standby.wait()
