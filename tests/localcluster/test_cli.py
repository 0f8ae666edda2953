"""The ``local-cluster`` command: up, status, scale, add-pod, delete-pod, down; one-line errors."""
import json
import os
import subprocess
import sys

import pytest

from localcluster import procs
from tests.waiting import wait_for


def lc(state_dir, *args, timeout=180):
    return subprocess.run([sys.executable, "-m", "localcluster.cli", *args, "--state-dir", str(state_dir)],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def daemon_pids(state_dir):
    out = []
    for pid in procs.all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().decode(errors="replace")
        except OSError:
            continue
        if str(state_dir) in cmd:
            out.append(pid)
    return out


@pytest.mark.slow
def test_up_status_scale_and_down_leaves_no_process(tmp_path):
    state = tmp_path / "lc"
    try:
        up = lc(state, "up", "--workers", "2", "--slots", "2")
        assert up.returncode == 0, up.stderr
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in up.stdout
        get = subprocess.run(["kubectl", "--kubeconfig", str(state / "kubeconfig"), "get", "pods"],
                             capture_output=True, text=True, timeout=60)
        assert get.returncode == 0, get.stderr
        assert [line.split()[:3] for line in get.stdout.splitlines()[1:]] == [
            ["worker-0", "1/1", "Running"], ["worker-1", "1/1", "Running"]]

        again = lc(state, "up", "--workers", "5")
        assert again.returncode == 0 and "already running" in again.stderr

        info = json.loads(lc(state, "status", "--json").stdout)
        assert set(info) == {"api", "kubeconfig", "identity", "ssh_port", "pods"}
        assert info["kubeconfig"] == str(state / "kubeconfig") and os.path.exists(info["identity"])
        assert [(p["name"], p["phase"], p["ready"], p["ssh_port"]) for p in info["pods"]] == [
            ("worker-0", "Running", True, 2222), ("worker-1", "Running", True, 2222)]
        assert len({p["ip"] for p in info["pods"]}) == 2

        assert lc(state, "scale", "3").returncode == 0
        added = lc(state, "add-pod", "--name", "extra", "--gpus", "1")
        assert added.returncode == 0 and added.stdout.startswith("extra 127."), added.stderr
        assert lc(state, "delete-pod", "worker-0", "--grace", "5").returncode == 0
        assert lc(state, "scale", "1").returncode == 0
        # scale counts live workers (worker-0 is going) and removes the highest-numbered ones
        wait_for(lambda: sorted(p["name"] for p in json.loads(lc(state, "status", "--json").stdout)["pods"]) == [
            "extra", "worker-1"], 60, "scale 1 to leave extra and worker-1", interval=0.1)
        fault = lc(state, "fault", "restart-api", "--seconds", "0.5")
        assert fault.returncode == 0 and json.loads(fault.stdout)["restarting"] is True
        # back by itself, same state
        wait_for(lambda: lc(state, "status", "--json").returncode == 0, 15, "the API back after restart-api",
                 interval=0.1)
        assert lc(state, "fault", "latency", "--seconds", "-1").stderr.startswith("error: --seconds must be >= 0")
        missing = lc(state, "delete-pod", "nope")
        assert missing.returncode == 1 and missing.stderr.strip() == 'error: pods "nope" not found'
        assert daemon_pids(state)
    finally:
        down = lc(state, "down")
    assert down.returncode == 0, down.stderr
    assert daemon_pids(state) == []
    assert not (state / "state.json").exists()
    again = lc(state, "status")
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and again.stderr.startswith("error: no cluster")


@pytest.mark.parametrize("args,code,message", [
    (["up", "--workers", "-1"], 2, "error: --workers must be >= 0, got -1"),
    (["scale", "2"], 1, "error: no cluster is running with state dir {state} (start one: local-cluster up)"),
])
def test_bad_input_is_one_line(tmp_path, args, code, message):
    proc = lc(tmp_path / "none", *args)
    assert (proc.returncode, proc.stderr.splitlines()) == (code, [message.format(state=tmp_path / "none")])


def test_namespaces_need_root(tmp_path):
    if os.geteuid() == 0:
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                               "localcluster.cli", "up", "--state-dir", str(tmp_path / "x")],
                              capture_output=True, text=True, timeout=60, cwd="/",
                              env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
                                  os.path.dirname(os.path.abspath(__file__))))))
    else:
        proc = lc(tmp_path / "x", "up")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: pods with their own hostname and /data need root")
    assert "--isolation none" in proc.stderr
