"""Pods are real hosts: own address, hostname and /data, reachable over SSH with the cluster key;
deleting a pod stops everything it runs, including what was started over SSH."""
import os

from localcluster import procs
from tests.waiting import wait_for


def test_two_pods_are_separate_ssh_hosts_and_deletion_kills_their_processes(cluster):
    cluster.create_pod("alpha")
    cluster.create_pod("beta")
    ip_a = cluster.wait_ready("alpha")
    ip_b = cluster.wait_ready("beta")
    assert ip_a != ip_b and ip_a.startswith("127.") and ip_a.rsplit(".", 1)[0] == ip_b.rsplit(".", 1)[0]

    # reach each by its podIP with the cluster key (pod_ip is what cluster.ssh uses)
    resolved = cluster.ssh("alpha", "getent hosts $(hostname)")
    assert resolved.stdout.split() == [ip_a, "alpha"], resolved.stderr  # /etc/hosts as in Kubernetes
    a = cluster.ssh("alpha", "hostname; echo from-alpha > /data/marker; ls /data")
    b = cluster.ssh("beta", "hostname; ls -A /data")
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr
    assert a.stdout.split() == ["alpha", "marker"]
    assert b.stdout.split() == ["beta"]  # beta's /data is not alpha's
    assert (cluster.pod_data_dir("alpha") / "marker").read_text() == "from-alpha\n"
    assert not (cluster.pod_data_dir("beta") / "marker").exists()

    # a process started over SSH keeps running after the session ends ...
    started = cluster.ssh("alpha", "nohup sleep 1000 >/dev/null 2>&1 & echo $!")
    assert started.returncode == 0, started.stderr
    # nohup execs sleep some time after the session returned: wait for it, do not race it
    wait_for(lambda: [p for p in _pods_processes(cluster, "alpha") if _cmdline(p) == "sleep 1000"], 30,
             "the sleep started over SSH to run in the pod")

    # ... until the pod is deleted: then every process of the pod is gone, beta is untouched
    pod_pids = _pods_processes(cluster, "alpha")
    cluster.delete_pod("alpha", grace_seconds=5)
    cluster.wait_gone("alpha", timeout=30)
    assert not [p for p in pod_pids if _exists(p)]
    assert not cluster.pod_data_dir("alpha").exists()
    assert cluster.ssh("beta", "hostname").stdout.strip() == "beta"

    # a new pod gets a new address while others are free
    cluster.create_pod("alpha")
    assert cluster.wait_ready("alpha") not in (ip_a, ip_b)


def test_a_pod_runs_none_of_the_hosts_shell_start_up_files(cluster):
    """A container's shell start-up files are its own: the host's ~/.bashrc (on this machine
    it runs ``pyenv init``: seconds per ssh command under load, and a stale pyenv lock hung
    every pod's ssh) reads as empty in a pod; the host's file is untouched."""
    import pytest

    from localcluster.kubelet import SHELL_STARTUP_FILES, login_home

    home = login_home()
    present = {f: os.path.getsize(os.path.join(home, f)) for f in SHELL_STARTUP_FILES
               if os.path.isfile(os.path.join(home, f))}
    if not any(present.values()):
        pytest.skip(f"no non-empty shell start-up file in {home} to hide")
    cluster.create_pod("gamma")
    cluster.wait_ready("gamma")
    seen = cluster.ssh("gamma", "; ".join(f'echo {f} $(wc -c < "$HOME/{f}")' for f in present))
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == [w for f in present for w in (f, "0")]
    assert {f: os.path.getsize(os.path.join(home, f)) for f in present} == present
    cluster.delete_pod("gamma", grace_seconds=5)


def test_sigterm_first_then_sigkill_after_the_grace_period(cluster):
    cluster.create_pod("stubborn")
    cluster.wait_ready("stubborn")
    # one process ignores SIGTERM, one records that it got it
    cmd = ("nohup sh -c 'trap \"\" TERM; while :; do sleep 0.2; done' >/dev/null 2>&1 & "
           "nohup sh -c 'trap \"echo got-term > /data/term; exit 0\" TERM; while :; do sleep 0.2; done' "
           ">/dev/null 2>&1 & echo ok")
    assert cluster.ssh("stubborn", cmd).stdout.strip() == "ok"
    data = cluster.pod_data_dir("stubborn")
    pids = _pods_processes(cluster, "stubborn")
    marked = cluster.delete_pod("stubborn", grace_seconds=2)
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 2
    wait_for(lambda: (data / "term").exists(), 10, "SIGTERM to reach the pod's processes")
    assert cluster.client.get_pod("stubborn")["metadata"]["deletionTimestamp"]  # still held by the stubborn one
    cluster.wait_gone("stubborn", timeout=30)
    assert not [p for p in pids if _exists(p)]


def test_pods_status_reports_ready_with_ip(cluster):
    cluster.create_pod("w", annotations={"elastic-horovod/slots": "2"}, gpus=1)
    ip = cluster.wait_ready("w")
    pod = cluster.client.get_pod("w")
    assert pod["status"]["phase"] == "Running" and pod["status"]["podIP"] == ip
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["metadata"]["annotations"] == {"elastic-horovod/slots": "2"}
    status = cluster.status()
    assert status["pods"] == [{"name": "w", "namespace": "default", "phase": "Running", "ready": True, "ip": ip,
                               "ssh_port": cluster.ssh_port, "uid": pod["metadata"]["uid"]}]


def test_a_pods_namespace_is_not_given_to_another_pod_until_the_pod_is_gone(cluster):
    """The kernel soon gives a freed pid namespace's number to a new namespace. The kubelet
    finds a pod's processes by that number (to stop, freeze or clean up the pod), so it holds
    the pod's namespace open until the pod is cleaned up: a pod whose sandbox died is still
    known by its number, and no newer pod can be signalled in its place."""
    import signal
    import subprocess

    cluster.create_pod("held")
    cluster.wait_ready("held")
    pids = _pods_processes(cluster, "held")
    assert pids, "no process of the pod found"
    ns = procs.namespace_of(pids[0])
    kubelet = int(cluster.state["pid"])
    for pid in pids:  # the sandbox dies: sshd and everything in the pod
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: cluster.client.get_pod("held")["status"].get("phase") == "Failed", 60,
             "the pod whose sandbox died to be Failed")
    assert not procs.in_namespace(ns)
    assert ns in _namespaces_held_by(kubelet), "the kubelet let go of a failed pod's namespace"
    for _ in range(20):  # new namespaces never take the held number
        made = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--", "readlink", "/proc/self/ns/pid"],
                              capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        assert made != ns
    cluster.delete_pod("held", grace_seconds=1)
    cluster.wait_gone("held", timeout=30)
    assert ns not in _namespaces_held_by(kubelet), "the kubelet kept a deleted pod's namespace open"


def _namespaces_held_by(pid):
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return held


def _pods_processes(cluster, name):
    """Host pids of every process of pod ``name`` (its pid namespace, found from its sshd)."""
    config = str(cluster.pod_data_dir(name).parent / "sshd_config")
    for pid in procs.all_pids():
        cmd = _cmdline(pid)
        if cmd.startswith("sshd:") and config in cmd:
            ns = procs.namespace_of(pid)
            assert ns != procs.namespace_of(os.getpid()), "the pod's sshd is not in its own pid namespace"
            return procs.in_namespace(ns)
    return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _exists(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def test_pods_die_with_the_cluster_process(tmp_path):
    import signal

    from localcluster.testing import running_cluster

    with running_cluster(tmp_path / "c", workers=1) as lc:
        pids = _pods_processes(lc, "worker-0")
        assert pids
        os.kill(lc.state["pid"], signal.SIGKILL)  # no chance to clean up
        wait_for(lambda: not [p for p in pids if _exists(p)], 10, "the pod's processes to die with the cluster")


def test_a_pod_whose_sshd_dies_is_failed_not_ready(cluster):
    import signal
    cluster.create_pod("fragile")
    cluster.wait_ready("fragile")
    init = [p for p in _pods_processes(cluster, "fragile")
            if _cmdline(p).startswith("sshd:") and "[listener]" in _cmdline(p)]
    assert len(init) == 1
    os.kill(init[0], signal.SIGKILL)
    pod = wait_for(lambda: (p := cluster.client.get_pod("fragile"))["status"]["phase"] == "Failed" and p, 15,
                   "the pod to be Failed")
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["Ready"] == "False" and "sshd exited" in pod["status"]["message"]
    cluster.delete_pod("fragile")
    cluster.wait_gone("fragile")


def test_set_ready_false_is_what_kubectl_and_clients_see(cluster):
    import subprocess
    cluster.create_pod("probe")
    cluster.wait_ready("probe")
    pod = cluster.set_ready("probe", False)
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    assert [c["ready"] for c in pod["status"]["containerStatuses"]] == [False]
    assert cluster.status()["pods"][0]["ready"] is False
    out = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "get", "pod", "probe", "--no-headers"],
                         capture_output=True, text=True, timeout=60).stdout.split()
    assert out[:3] == ["probe", "0/1", "Running"]
    cluster.set_ready("probe", True)
    assert cluster.wait_ready("probe", timeout=60) == cluster.pod_ip("probe")


def test_a_test_cluster_dies_with_a_killed_test_process(tmp_path):
    import subprocess
    import sys
    script = ("import os, sys\n"
              "from localcluster.testing import running_cluster\n"
              f"with running_cluster({str(tmp_path / 'c')!r}, workers=1) as c:\n"
              "    print(c.state['pid'], flush=True)\n"
              "    os._exit(0)  # no cleanup, as if killed\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    state_dir = str(tmp_path / "c")
    wait_for(lambda: not [p for p in procs.all_pids() if state_dir in _cmdline(p) and _exists(p)], 10,
             "the cluster's processes to die with the test process")


def test_force_delete_and_recreate_under_the_same_name(cluster):
    cluster.create_pod("again")
    first = cluster.wait_ready("again")
    cluster.ssh("again", "echo old > /data/f")
    cluster.delete_pod("again", grace_seconds=0)  # removed at once; its host is still stopping
    cluster.create_pod("again")
    second = cluster.wait_ready("again")
    assert second != first
    out = cluster.ssh("again", "hostname; ls -A /data")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["again"]  # a fresh /data, not the old one


def test_a_capped_node_keeps_the_pods_beyond_its_capacity_pending_and_binds_them_oldest_first(tmp_path):
    """``capacity`` (a capped pool): the third and fourth pods stay Pending
    without a node; when a running pod goes, the oldest waiting one gets its place."""
    from localcluster.testing import running_cluster

    with running_cluster(tmp_path / "c", workers=0, capacity=2) as lc:
        for name in ("p-0", "p-1", "p-2", "p-3"):
            lc.create_pod(name)
        lc.wait_ready("p-0", 60)
        lc.wait_ready("p-1", 60)

        def node(name):
            pod = lc.client.get_pod(name, "default")
            return pod["spec"].get("nodeName"), (pod.get("status") or {}).get("phase")

        assert node("p-2") == (None, "Pending") and node("p-3") == (None, "Pending")
        lc.delete_pod("p-1")
        assert lc.wait_ready("p-2", 60)
        assert node("p-3") == (None, "Pending")  # the one place went to the older of the two
        lc.wait_gone("p-1", 60)
        assert node("p-3") == (None, "Pending")
