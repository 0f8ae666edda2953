"""elastic-run as a user runs it: against a local cluster, with the daemon it starts itself,
real sshd pods and the real horovodrun. Its exit code follows the training's; it forwards
SIGTERM; it stops what it started; bad input is one line and a non-zero exit."""
import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.elastic.launch.conftest import BIN, ELASTIC_RUN, SELECTOR, env, launcher_args
from tests.waiting import wait_for


def daemon_processes(kubeconfig: Path | None = None) -> set[int]:
    """pids of discovery-daemon processes started by an elastic-run (they carry --prepare-cmd),
    for ``kubeconfig``'s cluster only if given (other runs on the machine have their own)."""
    out = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if kubeconfig is not None and str(kubeconfig).encode() not in cmd:
                continue
            if any(b"discovery-daemon" in a for a in cmd[:2]) and b"elastic.prepare.hook" in b" ".join(cmd):
                out.add(int(proc.name))
    return out


def test_exit_code_is_zero_when_the_training_succeeds(two_pods, tmp_path):
    before = daemon_processes(two_pods.kubeconfig)
    marker = tmp_path / "ran"
    proc = subprocess.run(
        launcher_args(two_pods, tmp_path) + ["--", "sh", "-c", f"hostname >> {marker}; exit 0"],
        capture_output=True, text=True, timeout=180, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    # both pods ran it (each pod has its own hostname)
    assert sorted(marker.read_text().split()) == ["worker-0", "worker-1"]
    summary = json.loads((tmp_path / "timeline.json").read_text())["summary"]
    assert summary["exit_code"] == 0
    assert "training exited with 0" in proc.stderr
    # spawn first: horovodrun is started while the daemon it asks for hosts still starts (its
    # workers' imports overlap the daemon's start-up), not after the daemon answers
    lines = proc.stderr.splitlines()
    running = next(i for i, line in enumerate(lines) if line.startswith("elastic-run: running: "))
    answered = next(i for i, line in enumerate(lines) if "elastic-run: started a discovery daemon at" in line)
    assert running < answered, "\n".join(lines[:20])
    # the daemon elastic-run started for the selector is gone again
    assert daemon_processes(two_pods.kubeconfig) - before == set()


def test_exit_code_is_non_zero_when_the_training_fails(two_pods, tmp_path):
    proc = subprocess.run(
        launcher_args(two_pods, tmp_path) + ["--", "sh", "-c", "exit 3"],
        capture_output=True, text=True, timeout=180, env=env())
    assert proc.returncode == 1, proc.stderr[-3000:]  # horovodrun: the job failed
    summary = json.loads((tmp_path / "timeline.json").read_text())["summary"]
    assert summary["exit_code"] == proc.returncode


def test_sigterm_is_forwarded_and_the_job_stops(two_pods, tmp_path):
    started = tmp_path / "started"
    p = subprocess.Popen(
        launcher_args(two_pods, tmp_path) + ["--", "sh", "-c", f"echo $$ >> {started}; exec sleep 300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        def alive() -> None:
            assert p.poll() is None, p.communicate()[1][-3000:]
        wait_for(lambda: started.exists() and len(started.read_text().split()) == 2, 120,
                 "both training processes to start", interval=0.2, alive=alive)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143
    assert "timeline:" in err
    # the training processes on the pods are gone
    for name in ("worker-0", "worker-1"):
        out = two_pods.ssh(name, "pgrep -x sleep || true").stdout.split()
        assert out == [], f"{name} still runs the training: {out}"


@pytest.mark.parametrize("args, message, code", [
    ([], "no training command given: elastic-run [options] -- COMMAND ...", 2),
    (["--dataset", "/nonexistent/mnist:/data/mnist", "--", "true"],
     "--dataset source /nonexistent/mnist: no such directory", 2),
    (["--ssh-identity-file", "/nonexistent/key", "--", "true"],
     "--ssh-identity-file /nonexistent/key: no such file", 2),
    (["--min-np", "4", "--max-np", "2", "--", "true"], "--max-np 2 is below --min-np 4", 2),
    (["--min-np", "many", "--", "true"], "argument --min-np: invalid int value: 'many' (see elastic-run --help)", 2),
    (["--dataset", "nocolon", "--", "true"], "--dataset wants SRC:DEST, got 'nocolon'", 2),
    (["--leave-grace", "soon", "--", "true"], "--leave-grace must be a number of seconds, got 'soon'", 2),
    (["--leave-grace", "-1", "--", "true"], "--leave-grace must be between 0 and 3600 seconds, got '-1'", 2),
    (["--leave-grace", "nan", "--", "true"], "--leave-grace must be between 0 and 3600 seconds, got 'nan'", 2),
])
def test_bad_input_is_one_line_and_exit_2(args, message, code):
    proc = subprocess.run([ELASTIC_RUN, *args], capture_output=True, text=True, timeout=60, env=env())
    assert proc.returncode == code
    assert proc.stderr.strip().splitlines() == [f"error: {message}"]


def test_no_daemon_and_no_selector_names_the_url(tmp_path):
    import socket
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc = subprocess.run([ELASTIC_RUN, "--discovery-url", url, "--", "true"],
                          capture_output=True, text=True, timeout=60, env=env())
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: no discovery daemon answers at {url}; give --selector (with --namespace/--kubeconfig) to start one"]


def test_with_a_daemon_already_running_it_pins_and_syncs_the_current_hosts(two_pods, tmp_path):
    """The deploy/ launcher's way: the daemon is a sidecar elastic-run finds at DISCOVERY_URL;
    elastic-run checks and pins the hosts it serves, syncs the dataset to them, and leaves
    the daemon running (it is not elastic-run's)."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "daemon.log", "w") as log:
        daemon = subprocess.Popen(
            [str(BIN / "discovery-daemon"), "--namespace", "default", "--selector", SELECTOR,
             "--kubeconfig", str(two_pods.kubeconfig), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=log, env=env())
    try:
        def serves_both() -> bool:
            try:
                return len(urllib.request.urlopen(url + "/hosts", timeout=2).read().split()) == 2
            except OSError:
                return False

        def daemon_alive() -> None:
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
        wait_for(serves_both, 60, "the daemon to serve both pods", interval=0.2, alive=daemon_alive)
        data = tmp_path / "ds"
        data.mkdir()
        (data / "hello.txt").write_text("hello from the launcher\n")
        dest = f"/data/run-cli-{tmp_path.name}"
        ssh_dir = tmp_path / "ssh"
        proc = subprocess.run(
            [ELASTIC_RUN, "--discovery-url", url, "--ssh-port", str(two_pods.ssh_port),
             "--ssh-identity-file", str(two_pods.identity), "--ssh-dir", str(ssh_dir),
             "--network-interface", "lo", "--min-np", "2", "--max-np", "2", "--elastic-timeout", "60",
             "--dataset", f"{data}:{dest}", "--",
             "sh", "-c", f'test "$(cat {dest}/hello.txt)" = "hello from the launcher"'],
            capture_output=True, text=True, timeout=180, env=env())
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert daemon.poll() is None, "elastic-run stopped a daemon it did not start"
        # both pods' host keys are pinned where the ssh wrapper horovodrun used looks
        pinned = (ssh_dir / "known_hosts").read_text()
        for pod in ("worker-0", "worker-1"):
            assert two_pods.pod_ip(pod) in pinned
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
