"""dataset-sync against the local cluster's pods (real sshd, real rsync, each pod its own /data).

Each test uses its own DEST so the tests do not depend on each other's order."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.elastic.conftest import (
    WORKERS,
    assert_host_has,
    cli,
    hosts_by_name,
    make_dataset,
    private_cache,
    sync,
    tool,
    wait_for,
)


def test_full_sync_then_incremental_resyncs(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds")
    ips = list(pod_ips.values())
    proc, report = sync(ssh_dir, src, "/data/full", "--hosts", ",".join(ips), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert report["ok"] and report["files"] == 121
    for ip in ips:
        h = hosts_by_name(report)[ip]
        assert (h["method"], h["files_sent"], h["attempts"]) == ("rsync", 121, 1)
        assert f"{ip}  ok" in proc.stdout
    assert "progress: total: 3/3 hosts done" in proc.stderr  # plain progress lines off a terminal
    for pod in WORKERS:
        assert_host_has(sync_cluster, pod, "/data/full", src)

    # Unchanged data: nothing is sent again; each host's copy is checked in place.
    proc, report = sync(ssh_dir, src, "/data/full", "--hosts", ",".join(ips))
    assert proc.returncode == 0, proc.stderr
    assert [(h["files_sent"], h["bytes_sent"], h["unchanged"]) for h in report["hosts"]] == [(0, 0, True)] * 3

    # A copy damaged on a host is noticed by that check and repaired (rsync --checksum).
    version = sync_cluster.ssh("worker-1", "readlink /data/full").stdout.strip()
    damaged = sync_cluster.pod_data_dir("worker-1") / version / "class05" / "img0005.bin"
    damaged.write_bytes(b"bit rot")
    proc, report = sync(ssh_dir, src, "/data/full", "--hosts", ",".join(ips))
    assert proc.returncode == 0, proc.stderr
    repaired = hosts_by_name(report)[pod_ips["worker-1"]]
    assert (repaired["unchanged"], repaired["files_sent"]) == (False, 1)
    assert_host_has(sync_cluster, "worker-1", "/data/full", src)

    # One file changed, one added, one removed: only the two new contents travel.
    (src / "class01" / "img0001.bin").write_bytes(b"changed" * 100)
    (src / "added.bin").write_bytes(b"new" * 1000)
    (src / "class02" / "img0002.bin").unlink()
    proc, report = sync(ssh_dir, src, "/data/full", "--hosts", ",".join(ips))
    assert proc.returncode == 0, proc.stderr
    assert [(h["files_sent"], h["bytes_sent"]) for h in report["hosts"]] == [(2, 3700)] * 3
    for pod in WORKERS:
        assert_host_has(sync_cluster, pod, "/data/full", src)


def test_interrupted_sync_keeps_the_previous_copy_and_a_rerun_completes(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=20, big_mib=1)
    host = pod_ips["worker-0"]
    proc, _ = sync(ssh_dir, src, "/data/interrupt", "--host", host)
    assert proc.returncode == 0, proc.stderr
    previous = tmp_path / "previous"
    subprocess.run(["cp", "-a", str(src), str(previous)], check=True)

    for i in range(24):  # version 2: 24 MiB more, copied at 2 MiB/s so there is time to kill it
        (src / f"part{i:02d}.bin").write_bytes(os.urandom(2**20))
    report = tmp_path / "killed.json"
    killed = subprocess.Popen([tool("dataset-sync"), str(src), "/data/interrupt", "--host", host, "--ssh-config",
                               str(ssh_dir / "ssh_config"), "--bwlimit", "2048", "--report", str(report)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, env=private_cache(tmp_path))
    staging = sync_cluster.pod_data_dir("worker-0") / ".interrupt.dataset-sync" / "staging"
    try:
        wait_for(lambda: len([p for p in staging.glob("part*.bin") if p.stat().st_size == 2**20]) >= 3,
                 timeout=60, what="a few files copied into staging")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    assert not report.exists()
    # DEST is still the complete previous copy.
    assert_host_has(sync_cluster, "worker-0", "/data/interrupt", previous)

    # SIGTERM (a pod being stopped) ends the run cleanly: exit 143 (128+15), its rsync gone, DEST intact.
    before = {p.name for p in staging.glob("part*.bin")}
    stopped = subprocess.Popen([tool("dataset-sync"), str(src), "/data/interrupt", "--host", host, "--ssh-config",
                                str(ssh_dir / "ssh_config"), "--bwlimit", "2048"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=private_cache(tmp_path))
    wait_for(lambda: {p.name for p in staging.glob("part*.bin")} - before, timeout=60, what="the copy to resume")
    stopped.send_signal(signal.SIGTERM)
    out, err = stopped.communicate(timeout=60)
    assert stopped.returncode == 128 + signal.SIGTERM, err
    assert "interrupted; DEST keeps its previous copy" in err and "FAILED" in out
    rsyncs = subprocess.run(["pgrep", "-f", f"rsync .*{host}:/data/.interrupt"], capture_output=True, text=True)
    assert rsyncs.stdout == ""
    assert_host_has(sync_cluster, "worker-0", "/data/interrupt", previous)

    proc, result = sync(ssh_dir, src, "/data/interrupt", "--host", host)
    assert proc.returncode == 0, proc.stderr
    sent = result["hosts"][0]["bytes_sent"]
    assert 0 < sent < 24 * 2**20 - 2 * 2**20  # the files already in staging were not sent again
    assert_host_has(sync_cluster, "worker-0", "/data/interrupt", src)


def test_an_unreachable_host_is_reported_while_the_others_succeed(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=10, big_mib=1)
    block = pod_ips["worker-0"].rsplit(".", 1)[0]
    down = f"{block}.251"
    hosts = [pod_ips["worker-0"], down, pod_ips["worker-1"]]
    proc, report = sync(ssh_dir, src, "/data/partial", "--hosts", ",".join(hosts), "--retries", "2")
    assert proc.returncode == 1
    outcome = hosts_by_name(report)
    assert outcome[pod_ips["worker-0"]]["ok"] and outcome[pod_ips["worker-1"]]["ok"]
    assert not outcome[down]["ok"] and outcome[down]["attempts"] == 2
    assert "Connection refused" in outcome[down]["error"]
    row = next(line for line in proc.stdout.splitlines() if line.startswith(down))
    assert "FAILED" in row and "Connection refused" in row
    assert proc.stderr.rstrip().splitlines()[-1] == f"error: 1 of 3 hosts failed: {down}"
    assert_host_has(sync_cluster, "worker-0", "/data/partial", src)
    assert_host_has(sync_cluster, "worker-1", "/data/partial", src)


def test_sftp_fallback_when_a_host_has_no_rsync(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=30, big_mib=1)
    host = pod_ips["worker-2"]
    no_rsync = ["--remote-rsync", "/nonexistent/bin/rsync"]  # what the host lacks, as rsync's --rsync-path

    # rsync forced on a host without it: refused at once, not retried.
    proc, report = sync(ssh_dir, src, "/data/sftp", "--host", host, "--transport", "rsync", *no_rsync)
    assert proc.returncode == 1 and report["hosts"][0]["attempts"] == 1
    assert "no /nonexistent/bin/rsync on the host" in report["hosts"][0]["error"]

    # auto: the probe finds no rsync and falls back to SFTP.
    proc, report = sync(ssh_dir, src, "/data/sftp", "--host", host, *no_rsync)
    assert proc.returncode == 0, proc.stderr
    assert (report["hosts"][0]["method"], report["hosts"][0]["files_sent"]) == ("sftp", 31)
    assert_host_has(sync_cluster, "worker-2", "/data/sftp", src)

    # SFTP is incremental too: the new version starts from the current one (hard links).
    (src / "class03" / "img0003.bin").write_bytes(b"v2")
    (src / "class04" / "img0004.bin").unlink()
    (src / "empty").rmdir()
    proc, report = sync(ssh_dir, src, "/data/sftp", "--host", host, "--transport", "sftp")
    assert proc.returncode == 0, proc.stderr
    row = report["hosts"][0]
    assert (row["method"], row["files_sent"], row["bytes_sent"]) == ("sftp", 1, 2)
    assert_host_has(sync_cluster, "worker-2", "/data/sftp", src)


REFUSALS = [
    (["/"], "refusing DEST '/'"),
    (["/etc/cron.d/x"], "outside the allowed roots (/data)"),
    (["/data"], "allowed root itself"),
    (["/data/$(touch /tmp/pwned)"], "not allowed in a remote path"),
    (["/data/a b"], "not allowed in a remote path"),
    (["/data/-x"], "looks like an option"),
    (["/scratch/x", "--allowed-root", "/data"], "outside the allowed roots"),
]


@pytest.mark.parametrize("dest_and_flags,message", REFUSALS)
def test_unsafe_dest_is_refused_before_any_host_is_touched(dest_and_flags, message, pod_ips, ssh_dir, tmp_path,
                                                           sync_cluster):
    src = make_dataset(tmp_path / "ds", small=2, big_mib=0)
    before = sorted(os.listdir(sync_cluster.pod_data_dir("worker-0")))
    proc, report = sync(ssh_dir, src, dest_and_flags[0], "--host", pod_ips["worker-0"], *dest_and_flags[1:])
    assert proc.returncode == 2 and report is None
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert sorted(os.listdir(sync_cluster.pod_data_dir("worker-0"))) == before


@pytest.mark.parametrize("flags, message", [
    (["--host", "-oProxyCommand=touch /tmp/pwned"], "looks like an option"),
    (["--hosts", "{w0},a;touch /tmp/pwned"], "bad host entry"),
    (["--host", "$(reboot)"], "is not a host name: characters other than"),
    (["--host", "{w0}", "--remote-rsync", "rsync;reboot"], "bad remote rsync command"),
])
def test_names_that_look_like_options_or_shell_are_refused(pod_ips, ssh_dir, tmp_path, flags, message):
    src = make_dataset(tmp_path / "ds", small=2, big_mib=0)
    proc, _ = sync(ssh_dir, src, "/data/names", *[f.replace("{w0}", pod_ips["worker-0"]) for f in flags])
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_escaping_symlinks_and_a_missing_source_are_refused(pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=2, big_mib=0)
    (src / "escape").symlink_to("../../etc")
    proc, _ = sync(ssh_dir, src, "/data/names", "--host", pod_ips["worker-0"])
    assert proc.returncode == 2 and "refusing symlink escape -> ../../etc: it points outside SRC" in proc.stderr
    proc, _ = sync(ssh_dir, tmp_path / "missing", "/data/names", "--host", pod_ips["worker-0"])
    assert proc.returncode == 2 and "missing dataset directory" in proc.stderr


def test_a_dest_not_made_by_dataset_sync_is_left_alone(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=2, big_mib=0)
    mine = sync_cluster.pod_data_dir("worker-1") / "handmade"
    mine.mkdir()
    (mine / "keep.txt").write_text("user data")
    proc, report = sync(ssh_dir, src, "/data/handmade", "--host", pod_ips["worker-1"])
    assert proc.returncode == 1 and report["hosts"][0]["attempts"] == 1
    assert "/data/handmade exists and is not managed by dataset-sync" in report["hosts"][0]["error"]
    assert (mine / "keep.txt").read_text() == "user data" and sorted(os.listdir(mine)) == ["keep.txt"]


def test_two_concurrent_syncs_to_one_dest_take_turns_on_the_host_lock(sync_cluster, pod_ips, ssh_dir, tmp_path):
    import fcntl

    first_src = make_dataset(tmp_path / "first", small=12, big_mib=8)
    second_src = make_dataset(tmp_path / "second", small=30, big_mib=1)
    host, dest = pod_ips["worker-2"], "/data/locked"
    state = sync_cluster.pod_data_dir("worker-2") / ".locked.dataset-sync"
    runs = []

    def start(src: Path, *flags: str) -> subprocess.Popen:
        proc = subprocess.Popen([tool("dataset-sync"), str(src), dest, "--host", host, "--ssh-config",
                                 str(ssh_dir / "ssh_config"), *flags], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=private_cache(tmp_path))
        runs.append(proc)
        return proc

    try:
        # ~32 s of copying while it holds the lock: room for the two below to start on a
        # loaded machine (with 4 s, both could start after it had finished, and nothing waited)
        first = start(first_src, "--bwlimit", "256")
        wait_for(lambda: any((state / "staging").rglob("*")), timeout=120, what="the first sync to be copying")
        second = start(second_src)
        # A third one that waits only briefly gives up with a clear per-host error.
        proc, report = sync(ssh_dir, second_src, dest, "--host", host, "--lock-timeout", "0.5")
        assert proc.returncode == 1, proc.stderr
        error = report["hosts"][0]["error"]
        assert "another dataset-sync to /data/locked held the host's lock" in error and "gave up waiting" in error
        assert report["hosts"][0]["attempts"] == 1  # waiting again would not help
        first_out, first_err = first.communicate(timeout=180)
        second_out, second_err = second.communicate(timeout=180)
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.communicate(timeout=30)
    assert first.returncode == 0, first_err
    assert second.returncode == 0, second_err
    assert "another dataset-sync to /data/locked is running on the host; waiting" in second_err
    # The second waited for the first's commit, so DEST is its complete, manifest-checked copy.
    assert_host_has(sync_cluster, "worker-2", dest, second_src)
    assert not (state / "staging").exists()
    with open(state / "lock", "rb") as handle:  # nobody holds the lock any more
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_second_sync_of_the_same_dataset_waits_for_the_first_and_copies_nothing(sync_cluster, pod_ips, ssh_dir,
                                                                                   tmp_path):
    """deploy/overlays/imagenet/: two workers on one node share its hostPath cache (1-GPU
    workers on a multi-GPU node). The second's preparation, started while the first's copy is
    under way, waits on the host's lock, then finds the first's verified copy and sends
    nothing: a new node copies once."""
    src = make_dataset(tmp_path / "ds", small=12, big_mib=4)
    host, dest = pod_ips["worker-1"], "/data/once"
    state = sync_cluster.pod_data_dir("worker-1") / ".once.dataset-sync"
    first_report = tmp_path / "first.json"
    # ~16 s of copying while it holds the lock
    first = subprocess.Popen([tool("dataset-sync"), str(src), dest, "--host", host, "--ssh-config",
                              str(ssh_dir / "ssh_config"), "--bwlimit", "256", "--report", str(first_report)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, env=private_cache(tmp_path))
    try:
        wait_for(lambda: any((state / "staging").rglob("*")), timeout=120, what="the first sync to be copying")
        proc, report = sync(ssh_dir, src, dest, "--host", host)
        _, first_err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate(timeout=30)
    assert first.returncode == 0, first_err
    assert proc.returncode == 0, proc.stderr
    assert f"another dataset-sync to {dest} is running on the host; waiting" in proc.stderr
    [copied] = json.loads(first_report.read_text())["hosts"]
    assert copied["bytes_sent"] >= 4 * 2**20 and not copied["unchanged"], copied
    [h] = report["hosts"]
    assert (h["ok"], h["unchanged"], h["files_sent"], h["bytes_sent"]) == (True, True, 0, 0), h
    assert_host_has(sync_cluster, "worker-1", dest, src)

def _rsyncs_into(staging_path: str) -> str:
    """Local rsync processes (any parent) whose command line names ``staging_path``."""
    return subprocess.run(["pgrep", "-af", f"rsync .*{staging_path}"], capture_output=True, text=True).stdout


def test_kill_9_mid_copy_leaves_no_writer_and_a_later_sync_stays_true_to_its_manifest(
        sync_cluster, pod_ips, ssh_dir, tmp_path):
    """``kill -9`` of dataset-sync alone (not its process group) while rsync copies;
    the orphaned transfer must not outlive it, locally or on the host, and a new sync of other
    data publishes a copy that still matches its manifest 30 s later."""
    host = pod_ips["worker-1"]
    big = make_dataset(tmp_path / "big", small=10, big_mib=1)
    for i in range(40):  # 40 MiB at 1 MiB/s: the copy outlasts the whole test if nothing stops it
        (big / f"part{i:02d}.bin").write_bytes(os.urandom(2**20))
    killed = subprocess.Popen([tool("dataset-sync"), str(big), "/data/orphan", "--host", host, "--ssh-config",
                               str(ssh_dir / "ssh_config"), "--bwlimit", "1024"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=private_cache(tmp_path))
    staging = sync_cluster.pod_data_dir("worker-1") / ".orphan.dataset-sync" / "staging"
    try:
        wait_for(lambda: len(list(staging.glob("part*.bin"))) >= 2, timeout=90, what="the copy under way")
    finally:
        killed.kill()  # SIGKILL to dataset-sync only, as the OOM killer or `kill -9 PID` would
        killed.wait(timeout=30)
    wait_for(lambda: _rsyncs_into(f"{host}:/data/.orphan") == "", timeout=30,
             what="no local rsync left behind by the killed sync")

    small = make_dataset(tmp_path / "small", small=12, big_mib=1)
    proc, report = sync(ssh_dir, small, "/data/orphan", "--host", host)
    assert proc.returncode == 0, proc.stderr
    assert report["ok"]
    assert_host_has(sync_cluster, "worker-1", "/data/orphan", small)
    # The observation window is the point: an orphaned writer (local or remote) would keep
    # adding the big dataset's files to the published copy during these 30 seconds.
    published = sync_cluster.pod_data_dir("worker-1") / sync_cluster.ssh(
        "worker-1", "readlink /data/orphan").stdout.strip()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert not list(published.glob("part*")) and not list(published.glob(".part*")), "a stale writer wrote"
        time.sleep(1)
    assert_host_has(sync_cluster, "worker-1", "/data/orphan", small)
    remote = sync_cluster.ssh("worker-1", "pgrep -af 'rsync --server' || true")
    assert ".orphan" not in remote.stdout and "orphan" not in remote.stdout


def test_a_worker_replaced_on_the_same_node_finds_the_cached_copy_and_copies_nothing(sync_cluster, tmp_path):
    """deploy/overlays/imagenet/: the workers' /data is a node-local hostPath. A replacement
    pod on that node (the same directory) is prepared without a byte copied: dataset-sync finds
    the current version's manifest digest and listing are the source's."""
    from localcluster import control

    def cached_worker(name: str) -> dict:
        pod = control.worker_pod(name, ssh_port=sync_cluster.ssh_port, labels={"app": "node-cache"})
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        pod["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/var/lib/elastic-horovod/datasets",
                                                                "type": "DirectoryOrCreate"}}]
        sync_cluster.client.create_pod(pod, "default")
        ip = sync_cluster.wait_ready(name)
        ssh = tmp_path / f"ssh-{name}"
        proc = cli("ssh-bootstrap", "hosts", "--identity", str(sync_cluster.identity), "--out", str(ssh),
                   "--port", str(sync_cluster.ssh_port), "--hosts", ip)
        assert proc.returncode == 0, proc.stderr
        proc, report = sync(ssh, src, "/data/cached", "--host", ip)
        assert proc.returncode == 0, proc.stderr
        return report["hosts"][0]

    src = make_dataset(tmp_path / "ds", small=20, big_mib=1)
    first = cached_worker("cached-0")
    assert first["bytes_sent"] > 2**20 and not first["unchanged"]
    sync_cluster.delete_pod("cached-0", grace_seconds=0)
    sync_cluster.wait_gone("cached-0")
    again = cached_worker("cached-1")
    assert (again["files_sent"], again["bytes_sent"], again["unchanged"]) == (0, 0, True)
    assert_host_has(sync_cluster, "cached-1", "/data/cached", src)
