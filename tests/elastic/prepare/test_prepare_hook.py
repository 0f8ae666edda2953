"""The discovery daemon's ``--prepare-cmd`` runs dataset-sync for each pod that joins, and the
pod is served to horovodrun only once its copy of the dataset is complete."""
from __future__ import annotations

import os
import shlex
import subprocess

from tests.elastic.conftest import BIN, assert_host_has, cli, make_dataset, private_cache, tool, wait_for


def served(socket_path) -> list[str]:
    """Hosts ``discover-hosts`` prints right now ([] while the daemon has no answer)."""
    proc = cli("discover-hosts", "--url", f"unix:{socket_path}", timeout=30)
    return [line.split(":")[0] for line in proc.stdout.splitlines()] if proc.returncode == 0 else []


def test_a_pod_that_joins_later_is_served_only_once_its_data_is_there(cluster, tmp_path):
    src = make_dataset(tmp_path / "ds", small=40, big_mib=4)
    ssh_dir = tmp_path / "ssh"
    # The hook says it started, waits for the test's gate, pins the new pod's host key, then
    # syncs to it: the test decides when preparation may finish, no timing involved. The daemon
    # runs it as ``sh -c HOOK -- HOST``, so the host is "$1".
    gate = tmp_path / "gate"
    gate.touch()
    hook = (f"touch {tmp_path}/started-\"$1\"; while [ ! -e {gate} ]; do sleep 0.1; done; "
            f"{tool('ssh-bootstrap')} hosts --identity {cluster.identity} --out {ssh_dir} --port {cluster.ssh_port}"
            f" --hosts=\"$1\" >/dev/null && exec {tool('dataset-sync')} {src} /data/ds"
            f" --ssh-config {ssh_dir}/ssh_config --host=\"$1\"")
    sock = tmp_path / "discovery.sock"
    log = open(tmp_path / "daemon.log", "w")
    env = private_cache(tmp_path, dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"))
    cluster.create_pod("worker-0")
    first = cluster.wait_ready("worker-0")
    daemon = subprocess.Popen(
        [tool("discovery-daemon"), "--kubeconfig", str(cluster.kubeconfig),
         "--selector", "app=elastic-horovod,role=worker", "--socket", str(sock),
         "--prepare-cmd", f"sh -c {shlex.quote(hook)}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: served(sock) == [first], timeout=120, what="worker-0 prepared and served")
        assert_host_has(cluster, "worker-0", "/data/ds", src)

        gate.unlink()
        cluster.create_pod("worker-1")
        later = cluster.wait_ready("worker-1")
        wait_for(lambda: (tmp_path / f"started-{later}").exists(), timeout=120, what="the hook to start for worker-1")
        # Ready, its preparation under way (held at the gate): not served, no data yet
        assert served(sock) == [first]
        assert not (cluster.pod_data_dir("worker-1") / "ds").exists()
        gate.touch()
        wait_for(lambda: later in served(sock), timeout=120, what="worker-1 served once prepared")
        # The first moment it is served, its copy is complete and verified.
        assert_host_has(cluster, "worker-1", "/data/ds", src)
        assert sorted(served(sock)) == sorted([first, later])

        # Without a host flag dataset-sync asks discover-hosts: both served pods get the update.
        (src / "update.bin").write_bytes(b"u" * 4096)
        proc = cli("dataset-sync", str(src), "/data/ds", "--ssh-config", str(ssh_dir / "ssh_config"),
                   env=dict(env, DISCOVERY_URL=f"unix:{sock}"))
        assert proc.returncode == 0, proc.stderr
        for pod in ("worker-0", "worker-1"):
            assert_host_has(cluster, pod, "/data/ds", src)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()
