"""The local cluster with ``--runtime containers``: every pod a container of the worker image.

What ships is what runs: the image's entrypoint, sshd settings, rsync and installed commands
serve ssh-bootstrap, dataset-sync, an elastic MNIST job (with a pod joining and one leaving
gracefully) and the daemon image's discovery-daemon, all unchanged against the cluster."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from localcluster.testing import running_cluster
from shared.metrics_record import read_records
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(3600)
BIN = Path(sys.executable).parent
SELECTOR = "app=elastic-horovod,role=worker"


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    e["PYTHONUNBUFFERED"] = "1"
    for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET"):
        e.pop(name, None)
    return e


def containers_of(cluster) -> list[str]:
    out = subprocess.run(["podman", "ps", "--all", "--format", "{{.Names}}", "--filter",
                          "label=io.elastic-horovod.localcluster"], capture_output=True, text=True, timeout=120)
    from localcluster.containers import cluster_id_of

    return [n for n in out.stdout.split() if n.startswith(f"lc-{cluster_id_of(str(cluster.state_dir))}-")]


def test_a_container_pod_is_pinned_by_ssh_bootstrap_and_filled_by_dataset_sync(images, tmp_path):
    with running_cluster(tmp_path / "cluster", workers=1, runtime="containers", image=images[0],
                         timeout=300) as c:
        ip = c.wait_ready("worker-0", timeout=300)
        # the pod's own hostname (also in /etc/hosts with its IP), the image's tini as PID 1
        who = c.ssh("worker-0", "hostname; getent hosts worker-0; tr '\\0' ' ' </proc/1/cmdline; echo; "
                                "command -v python")
        assert who.returncode == 0, who.stderr
        lines = who.stdout.splitlines()
        assert lines[0] == "worker-0"
        assert lines[1].split() == [ip, "worker-0"]
        assert lines[2].split()[0] == "/usr/bin/tini"
        assert lines[3] == "/opt/venv/bin/python"
        # /data is the pod's data directory
        (c.pod_data_dir("worker-0") / "marker").write_text("from the host\n")
        assert c.ssh("worker-0", "cat /data/marker").stdout == "from the host\n"

        # ssh-bootstrap pins the container's own host key
        out = tmp_path / "ssh"
        boot = subprocess.run([str(BIN / "ssh-bootstrap"), "hosts", "--identity", str(c.identity), "--out",
                               str(out), "--port", str(c.ssh_port), "--hosts", ip],
                              capture_output=True, text=True, timeout=300, env=env())
        assert boot.returncode == 0, boot.stderr
        scan = subprocess.run(["ssh-keyscan", "-t", "ed25519", "-p", str(c.ssh_port), ip], capture_output=True,
                              text=True, timeout=60)
        key = [ln.split()[-1] for ln in scan.stdout.splitlines() if ln and not ln.startswith("#")][0]
        assert key in (out / "known_hosts").read_text()

        # dataset-sync fills /data over that pinned connection, with the image's rsync
        src = tmp_path / "dataset"
        (src / "a").mkdir(parents=True)
        for i in range(20):
            (src / "a" / f"f{i}.bin").write_bytes(os.urandom(2000 + i))
        sync = subprocess.run([str(BIN / "dataset-sync"), str(src), "/data/ds", "--ssh-config",
                               str(out / "ssh_config"), "--hosts", ip], capture_output=True, text=True,
                              timeout=300, env=dict(env(), XDG_CACHE_HOME=str(tmp_path / "xdg")))
        assert sync.returncode == 0, sync.stderr
        check = c.ssh("worker-0", "cd /data/ds/a && sha256sum f*.bin | sort")
        want = "".join(sorted(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n"
                              for f in (src / "a").glob("f*.bin")))
        assert check.stdout == want and check.stdout.count("\n") == 20

        # graceful delete stops the container; the pod and its container are gone
        assert len(containers_of(c)) == 1
        c.delete_pod("worker-0", grace_seconds=30)
        c.wait_gone("worker-0", timeout=120)
        wait_for(lambda: not containers_of(c), 60, "the pod's container to be removed")


def test_an_elastic_mnist_job_on_container_pods_survives_a_join_and_a_graceful_leave(images, tmp_path):
    data = tmp_path / "mnist"
    gen = subprocess.run([sys.executable, "-m", "training.datagen", str(data), "--train", "1200", "--test", "200"],
                         capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    # the metrics file and the hold file are read on the host and written in the pods: a
    # directory shared with every container at the same path (a ReadWriteMany volume)
    shared = tmp_path / "shared"
    shared.mkdir()
    metrics = shared / "metrics.jsonl"
    metrics.touch()
    hold = shared / "hold"
    timeline_file = tmp_path / "timeline.json"
    chaos_log = tmp_path / "chaos.log"
    # horovodrun exports the launcher's environment to the ranks: the image's venv first on PATH
    launcher_env = dict(env(), PATH=f"/opt/venv/bin:{BIN}:{os.environ.get('PATH', '')}")
    with running_cluster(tmp_path / "cluster", workers=2, runtime="containers", image=images[0],
                         shared_dirs=(str(shared),), timeout=300) as c, open(chaos_log, "w") as chaos_out:
        chaos = subprocess.Popen(
            [sys.executable, "-m", "localcluster.chaos", "--state-dir", str(c.state_dir),
             "--metrics-file", str(metrics), "--steps", "add,delete", "--delete-pod", "worker-1",
             "--hold-file", str(hold), "--timeout", "900"],
            stdout=subprocess.DEVNULL, stderr=chaos_out, env=env())
        try:
            run = subprocess.run(
                [str(BIN / "elastic-run"), "--selector", SELECTOR,
                 "--kubeconfig", str(c.kubeconfig), "--ssh-port", str(c.ssh_port),
                 "--ssh-identity-file", str(c.identity), "--network-interface", "lo",
                 "--min-np", "2", "--max-np", "3", "--elastic-timeout", "300",
                 "--blacklist-cooldown-range", "5", "30",
                 "--dataset", f"{data}:/data/mnist", "--metrics-file", str(metrics),
                 "--timeline-file", str(timeline_file), "-x", "OMP_NUM_THREADS=1", "--",
                 "python", "-m", "training.mnist", "--data-dir", "/data/mnist", "--epochs", "2",
                 "--batch-size", "16", "--lr", "0.05", "--commit-every", "3", "--log-every", "3",
                 "--debug-step-delay", "0.5", "--debug-hold-file", str(hold),
                 "--metrics-file", str(metrics)],
                capture_output=True, text=True, timeout=1500, env=launcher_env)
            try:
                chaos.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        finally:
            if chaos.poll() is None:
                chaos.kill()
                chaos.wait()
        report = f"elastic-run ({run.returncode}):\n{run.stderr[-4000:]}\nchaos ({chaos.returncode}):\n" \
                 f"{chaos_log.read_text()}"
        assert run.returncode == 0, report
        assert chaos.returncode == 0, report
        joined = c.pod_data_dir("worker-2") / "mnist"
        for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
            assert (joined / name).read_bytes() == (data / name).read_bytes()

    summary = json.loads(timeline_file.read_text())["summary"]
    assert summary["exit_code"] == 0 and summary["epochs"] == 2
    sizes = {r.world_size for r in read_records(metrics)}
    assert {2, 3} <= sizes, sorted(sizes)
    # worker-1 left gracefully: its rank, started over ssh, got SIGTERM through the container's
    # entrypoint and left at a commit (without the forwarding it would be SIGKILLed silently)
    assert "SIGTERM: rank" in run.stdout + run.stderr and "leaves the job" in run.stdout + run.stderr, report


def test_the_daemon_image_serves_the_cluster_pods_to_discover_hosts(images, tmp_path):
    with running_cluster(tmp_path / "cluster", workers=2, runtime="containers", image=images[0],
                         timeout=300) as c:
        ips = sorted(c.wait_ready(name, timeout=300) for name in ("worker-0", "worker-1"))
        # the daemon runs as uid 10001: give it a kubeconfig it may read (a Secret mount's mode)
        kube = tmp_path / "kube"
        kube.mkdir()
        shutil.copy(c.kubeconfig, kube / "config")
        os.chmod(kube / "config", 0o644)
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        name = f"eh-daemon-{uuid.uuid4().hex[:8]}"
        with open(tmp_path / "daemon.log", "wb") as daemon_log:
            daemon = subprocess.Popen(
                ["podman", "run", "--rm", "--name", name, "--network", "host", "--cap-drop", "ALL",
                 "--security-opt", "no-new-privileges", "--volume", f"{kube}:/kube:ro", images[1],
                 "--selector", SELECTOR, "--kubeconfig", "/kube/config", "--host", "127.0.0.1", "--port", str(port)],
                stdout=subprocess.DEVNULL, stderr=daemon_log)
        try:
            def hosts():
                if daemon.poll() is not None:
                    pytest.fail(f"daemon exited {daemon.returncode}: {(tmp_path / 'daemon.log').read_text()[-2000:]}")
                run = subprocess.run([str(BIN / "discover-hosts"), "--url", f"http://127.0.0.1:{port}"],
                                     capture_output=True, text=True, timeout=60, env=env())
                return run.stdout if run.returncode == 0 and run.stdout.count("\n") == 2 else None

            out = wait_for(hosts, 180, "discover-hosts to list both pods from the daemon image", interval=0.5)
            assert sorted(line.split(":")[0] for line in out.splitlines()) == ips
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as resp:
                assert resp.status == 200
        finally:
            subprocess.run(["podman", "stop", "--time", "10", name], capture_output=True, timeout=120)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        assert daemon.returncode == 0, (tmp_path / "daemon.log").read_text()[-2000:]
