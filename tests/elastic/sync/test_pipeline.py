"""Pipelined relay: the pure plan and schedule (tables), and runs against the local cluster's
pods (real sshd, real rsync daemons serving each pod's verified chunks)."""
from __future__ import annotations

import math
import os
import re
import threading

import pytest

from elastic.common.hostlist import Host
from elastic.errors import ConfigError
from elastic.ssh.exec import SSHClient
from elastic.sync.manifest import build_manifest
from elastic.sync.pipeline import MAX_CHUNKS, ChunkSchedule, chunk_count, chunk_plan
from elastic.sync.pipeline_run import commit_checked_script, names_digest
from elastic.sync.relay import LAUNCHER
from elastic.sync.remote import Layout
from elastic.sync.retry import RetryPolicy
from elastic.sync.service import SyncOptions
from tests.elastic.conftest import (
    assert_host_has,
    hosts_by_name,
    make_dataset,
    pods_with_ssh,
    rsync_hidden,
    sync,
    wait_for,
)

MIB = 2**20

# -- chunk_plan ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("total_mib", "hosts", "chunk_mib", "chunks"), [
    (4, 16, 8, 1),          # smaller than one chunk: one chunk, today's relay
    (100, 16, 8, 12),       # each at least --chunk-mib
    (1000, 16, 8, 32),      # 8*log2(16)
    (1000, 8, 8, 24),       # 8*log2(8)
    (10000, 1000, 8, MAX_CHUNKS),
    (1000, 1, 8, 1),        # one host (a late joiner): chunks would only add transfers
    (1000, 2, 8, 8),
])
def test_chunk_count_follows_hosts_and_chunk_size(total_mib, hosts, chunk_mib, chunks) -> None:
    assert chunk_count(total_mib * MIB, hosts, chunk_mib * MIB) == chunks


def test_chunk_plan_cuts_whole_files_into_about_equal_chunks() -> None:
    sizes = {f"f{i:03d}": (1 if i < 150 else 10) * MIB for i in range(200)}  # 650 MiB: small, then big files
    plan = chunk_plan(sizes, 16, 8 * MIB)
    assert len(plan) == 32
    assert sorted(p for c in plan for p in c) == sorted(sizes)          # every file, once
    sums = [sum(sizes[p] for p in c) for c in plan]
    target = sum(sizes.values()) / len(plan)
    assert all(abs(s - target) <= 10 * MIB for s in sums), sums        # equal bytes, within one file
    assert list(plan[0]) == sorted(plan[0]) and plan[0][0] == "f000"  # path order


def test_chunk_plan_of_big_files_and_empty_datasets() -> None:
    assert chunk_plan({"a": 100 * MIB, "b": 1}, 16, 8 * MIB) == [("a",), ("b",)]  # no empty chunk
    assert chunk_plan({}, 4, MIB) == [()]
    assert chunk_plan({"empty": 0}, 4, MIB) == [("empty",)]
    with pytest.raises(ConfigError, match="--chunk-mib must be > 0"):
        chunk_count(10, 2, 0)


# -- ChunkSchedule -------------------------------------------------------------------------------

def _hosts(n: int) -> list[str]:
    return [f"h{i}" for i in range(n)]


def _equal_time(schedule: ChunkSchedule) -> int:
    """Drive the schedule as if every transfer took one chunk time and succeeded."""
    steps = 0
    while not schedule.finished:
        started = schedule.next_transfers()
        assert started, "nothing running and nothing to start"
        for sender, host, chunk in started:
            schedule.succeeded(sender, host, chunk)
        steps += 1
    return steps


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 15, 16, 31, 32])
@pytest.mark.parametrize("k", [1, 2, 5, 24, 32, 64])
def test_equal_transfers_take_the_lower_bound(n, k) -> None:
    assert _equal_time(ChunkSchedule(_hosts(n), k)) == k + math.ceil(math.log2(n + 1)) - 1


@pytest.mark.parametrize("n", [6, 10, 12, 20, 24, 28])
def test_other_host_counts_are_at_most_one_chunk_time_above_it(n) -> None:
    for k in (3, 16, 32):
        assert _equal_time(ChunkSchedule(_hosts(n), k)) <= k + math.ceil(math.log2(n + 1))


def test_each_pair_copies_the_rarest_chunk_the_receiver_lacks() -> None:
    s = ChunkSchedule(_hosts(4), 3)
    s.have = {"h0": {0, 1}, "h1": {0}, "h2": {0}, "h3": set()}
    started = s.next_transfers()
    senders = {snd: (h, c) for snd, h, c in started}
    assert senders[LAUNCHER][1] == 2                                  # nobody holds chunk 2
    assert senders["h0"][1] == 1                                      # 1 is rarer than 0
    assert len(started) == 3 and {h for _, h, _ in started} == {"h1", "h2", "h3"}
    assert all(c not in s.have[h] for _, h, c in started)


def test_one_transfer_per_sender_and_per_receiver() -> None:
    s = ChunkSchedule(_hosts(6), 8)
    s.have["h0"] = {0, 1, 2}
    started = s.next_transfers()
    assert len({snd for snd, _, _ in started}) == len(started) == len({h for _, h, _ in started}) == 2
    assert s.next_transfers() == []                                   # both senders busy


def test_a_failed_host_withdraws_its_chunks_only() -> None:
    s = ChunkSchedule(_hosts(3), 2, attempts=2)
    s.have = {"h0": {0, 1}, "h1": {0}, "h2": set()}
    s.give_up("h0")
    assert s.have["h0"] == set() and s.have["h1"] == {0}
    started = s.next_transfers()
    assert started and all(snd != "h0" and h != "h0" for snd, h, _ in started)
    for snd, h, c in started:
        s.succeeded(snd, h, c)
    _equal_time(s)
    assert s.complete("h1") and s.complete("h2") and not s.complete("h0") and s.finished


def test_failures_charged_to_a_host_give_it_up_after_its_attempts() -> None:
    s = ChunkSchedule(["x"], 1, attempts=2)
    [(snd, h, c)] = s.next_transfers()
    assert not s.failed(snd, h, c)
    [(snd, h, c)] = s.next_transfers()
    assert s.failed(snd, h, c) and "x" in s.failed_hosts and s.finished


def test_a_sender_stops_serving_after_failing_two_different_hosts_in_a_row() -> None:
    s = ChunkSchedule(_hosts(4), 2)
    s.have["h0"] = {0, 1}
    s.sending.add("h0"), s.receiving.update({"h1": 0})
    s.failed("h0", "h1", 0)
    assert "h0" not in s.retired                                      # one host: may be the host's fault
    s.sending.add("h0"), s.receiving.update({"h1": 0})
    s.failed("h0", "h1", 0)
    assert "h0" not in s.retired                                      # the same host again
    s.sending.add("h0"), s.receiving.update({"h2": 1})
    s.failed("h0", "h2", 1)
    assert "h0" in s.retired and all(snd != "h0" for snd, _, _ in s.next_transfers())
    assert s.have["h0"] == {0, 1}                                     # it keeps its chunks


def test_a_success_clears_a_senders_strikes() -> None:
    s = ChunkSchedule(_hosts(4), 2)
    s.have["h0"] = {0, 1}
    for host, ok in (("h1", False), ("h2", True), ("h3", False)):
        s.sending.add("h0"), s.receiving.update({host: 0})
        s.succeeded("h0", host, 0) if ok else s.failed("h0", host, 0)
    assert "h0" not in s.retired


def test_a_refused_or_gone_sender_is_not_charged_to_the_receiver() -> None:
    s = ChunkSchedule(_hosts(3), 1, attempts=1)
    s.have["h0"] = {0}
    s.sending.add("h0"), s.receiving.update({"h1": 0})
    assert not s.failed("h0", "h1", 0, refused=True)
    assert s.failures["h1"] == 0 and "h1" not in s.failed_hosts
    s.sending.add("h0"), s.receiving.update({"h2": 0})
    assert not s.failed("h0", "h2", 0, sender_gone=True)
    assert s.failures["h2"] == 0 and "h0" in s.retired
    assert {(snd, h) for snd, h, _ in s.next_transfers()} == {(LAUNCHER, "h1")}  # not from h0 again


def test_an_unreachable_receiver_does_not_strike_its_sender() -> None:
    s = ChunkSchedule(_hosts(4), 1)
    s.have["h0"] = {0}
    for host in ("h1", "h2"):
        s.sending.add("h0"), s.receiving.update({host: 0})
        s.failed("h0", host, 0, blame_sender=False)
    assert "h0" not in s.retired and s.failures["h1"] == s.failures["h2"] == 1


def test_a_sender_sends_again_while_its_receiver_checks_the_chunk() -> None:
    s = ChunkSchedule(_hosts(3), 2)
    [(snd, h, c)] = s.next_transfers()
    assert snd == LAUNCHER
    s.sent(snd, h, c)                                                 # arrived; the host checks it
    [(snd2, h2, c2)] = s.next_transfers()
    assert snd2 == LAUNCHER and h2 != h                               # the launcher sends on at once
    assert c not in s.have[h] and s.next_transfers() == []            # not served before its check
    assert s.failed(snd, h, c) is False and s.failures[h] == 1        # a failed check: charged, retried
    s.sent(snd2, h2, c2)
    s.succeeded(snd2, h2, c2)
    assert s.have[h2] == {c2}
    _equal_time(s)
    assert all(s.complete(x) for x in s.hosts)


def test_peers_serve_every_chunk_before_the_launcher() -> None:
    s = ChunkSchedule(["joiner"], 3, peers=["p0", "p1"])
    assert _equal_time(s) == 3
    s = ChunkSchedule(["joiner"], 3, peers=["p0", "p1"])
    [(sender, host, chunk)] = s.next_transfers()
    assert (sender, host) == ("p0", "joiner")                  # a peer, not the launcher
    s.succeeded(sender, host, chunk)
    [(sender, _, _)] = s.next_transfers()
    assert sender == "p0"


def test_a_gone_peer_is_not_charged_and_serves_no_one_again() -> None:
    s = ChunkSchedule(["a", "b"], 2, attempts=1, peers=["p0"])
    started = dict((h, (snd, c)) for snd, h, c in s.next_transfers())
    assert {snd for snd, _ in started.values()} == {"p0", LAUNCHER}
    receiver = next(h for h, (snd, _) in started.items() if snd == "p0")
    assert not s.failed("p0", receiver, started[receiver][1], sender_gone=True)
    assert s.failures[receiver] == 0 and "p0" in s.retired
    assert all(snd != "p0" for snd, _, _ in s.next_transfers())


# -- against pods --------------------------------------------------------------------------------

def test_chunks_are_served_between_pods_and_every_copy_is_verified(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=40, big_mib=4)
    ips = list(pod_ips.values())
    proc, report = sync(ssh_dir, src, "/data/pipe", "--hosts", ",".join(ips), "--relay", "pipeline",
                        "--chunk-mib", "1", "--bwlimit", "8192")
    assert proc.returncode == 0, proc.stderr
    hosts = hosts_by_name(report)
    assert any(h["source"] != LAUNCHER for h in hosts.values()), report   # some chunk came from a pod
    assert all(h["ok"] and h["attempts"] == 1 for h in hosts.values()), report
    for pod in pod_ips:
        assert_host_has(sync_cluster, pod, "/data/pipe", src)
        listing = sync_cluster.ssh(pod, "ls -A /data/.pipe.dataset-sync").stdout.split()
        assert "serve" not in listing and "staging" not in listing      # cleaned up, committed
    again, report = sync(ssh_dir, src, "/data/pipe", "--hosts", ",".join(ips), "--relay", "pipeline")
    assert again.returncode == 0 and all(h["unchanged"] for h in report["hosts"]), again.stderr


def test_a_pod_deleted_while_serving_costs_its_receivers_nothing(sync_cluster, tmp_path, monkeypatch):
    from elastic.sync.relay_run import distribute

    names = ["pipe-a", "pipe-b", "pipe-c"]
    ips, ssh = pods_with_ssh(sync_cluster, tmp_path, names)
    src = make_dataset(tmp_path / "ds", small=10, big_mib=4)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    a = ips["pipe-a"]
    started: list[tuple[str, str, int]] = []
    result = {}
    options = SyncOptions(ssh_config=str(ssh / "ssh_config"), bwlimit_kbps=2048, chunk_mib=1,
                          retry=RetryPolicy(attempts=2, base=0.2))

    def run() -> None:
        result["report"] = distribute(str(src), "/data/pipekill", [Host(ip) for ip in ips.values()], options,
                                      relay="pipeline", on_transfer=lambda s, h, c: started.append((s, h, c)))

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: any(s == a for s, _, _ in started), 60, "a to serve a chunk")
    sync_cluster.delete_pod("pipe-a", grace_seconds=0)
    t.join(120)
    assert not t.is_alive()
    out = {h.host: h for h in result["report"].hosts}
    assert not out[a].ok
    for n in ("pipe-b", "pipe-c"):
        h = out[ips[n]]
        assert h.ok and h.attempts == 1, h                            # served elsewhere, uncharged
        assert_host_has(sync_cluster, n, "/data/pipekill", src)


@pytest.mark.parametrize("tamper", ["", "replaced", "unchecked", "extra"])
def test_the_commit_takes_only_the_files_whose_check_passed(sync_cluster, pod_ips, ssh_dir, tmp_path, tamper):
    """The commit does not hash the copy again: it takes staging only when its names are the
    manifest's and each file is the one its chunk's check hashed and linked into serve."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "a.txt").write_text("alpha")
    (src / "d" / "b.txt").write_text("beta")
    (src / "l").symlink_to("a.txt")
    layout = Layout(f"/data/commit-{tamper or 'ok'}")
    ip = next(iter(pod_ips.values()))
    client = SSHClient(config=str(ssh_dir / "ssh_config"))
    tampering = {
        "": "",
        "replaced": "printf beta > t && mv t d/b.txt",                # same content, not the checked file
        "unchecked": "rm ../serve/a.txt",                             # never linked by a check
        "extra": "printf x > extra && ln extra ../serve/extra",
    }[tamper]
    prepared = client.run(ip, f"""set -e
mkdir -p {layout.state}/staging/d {layout.state}/serve && cd {layout.state}/staging
printf alpha > a.txt && printf beta > d/b.txt && ln -s a.txt l
cp -al --parents -t ../serve a.txt d/b.txt
{tampering}""")
    assert prepared.returncode == 0, prepared.stderr
    out = client.run(ip, commit_checked_script(layout, names_digest(build_manifest(str(src))), "v-new", ""),
                     stdin=b"{}").stdout.decode()
    if tamper:
        assert "verify=mismatch" in out and "committed" not in out, out
        assert client.run(ip, f"test -e {layout.dest}").returncode == 1          # nothing published
    else:
        assert "verify=ok" in out and "committed=v-new" in out, out
        assert client.run(ip, f"cat {layout.dest}/d/b.txt").stdout == b"beta"


def _joiner_source(report: dict, host: str) -> tuple[int, int]:
    """(chunks from peers, chunks) of ``host``'s pipelined copy, from the report's source."""
    match = re.fullmatch(r"(\d+)/(\d+) chunks from peers", hosts_by_name(report)[host]["source"])
    assert match, report
    return int(match.group(1)), int(match.group(2))


def test_auto_takes_the_pipeline_and_a_late_joiner_pulls_from_peers(sync_cluster, pod_ips, ssh_dir, tmp_path):
    """What the prepare hook runs for a late joiner (``--peers-file`` of the job's hosts, the
    default ``--relay auto``): the pipeline, every chunk from the hosts that hold the dataset."""
    src = make_dataset(tmp_path / "ds", small=30, big_mib=3)
    first = [pod_ips["worker-0"], pod_ips["worker-1"]]
    proc, report = sync(ssh_dir, src, "/data/pjoin", "--hosts", ",".join(first))
    assert proc.returncode == 0, proc.stderr
    assert report["path"] == "parallel" and "path: parallel (--relay auto)" in proc.stdout   # 2 hosts, no peers
    joiner = pod_ips["worker-2"]
    proc, report = sync(ssh_dir, src, "/data/pjoin", "--host", joiner, "--chunk-mib", "1",
                        "--peers-file", str(ssh_dir / "hostfile"))
    assert proc.returncode == 0, proc.stderr
    assert report["path"] == "pipeline" and "path: pipeline (--relay auto)" in proc.stdout
    from_peers, chunks = _joiner_source(report, joiner)
    assert from_peers == chunks, report                           # none from the launcher
    assert hosts_by_name(report)[joiner]["attempts"] == 1
    assert_host_has(sync_cluster, "worker-2", "/data/pjoin", src)


def test_a_peer_whose_copy_differs_or_is_gone_is_not_used_nor_charged(sync_cluster, pod_ips, ssh_dir, tmp_path,
                                                                         monkeypatch):
    from elastic.sync.relay_run import distribute

    src = make_dataset(tmp_path / "ds", small=30, big_mib=3)
    other = make_dataset(tmp_path / "other", small=5, big_mib=1)
    corrupt, older, joiner = pod_ips["worker-0"], pod_ips["worker-1"], pod_ips["worker-2"]
    for host, tree in ((corrupt, src), (older, other)):
        proc, _ = sync(ssh_dir, tree, "/data/pbad", "--host", host)
        assert proc.returncode == 0, proc.stderr
    # the peer's copy damaged without a change of size or mtime: its quick check still passes
    version = sync_cluster.ssh("worker-0", "readlink /data/pbad").stdout.strip()
    for bad in (sync_cluster.pod_data_dir("worker-0") / version).rglob("*.bin"):
        st = bad.stat()
        bad.write_bytes(bytes(b ^ 0xFF for b in bad.read_bytes()))
        os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    gone = corrupt.rsplit(".", 1)[0] + ".250"                     # no pod there
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    senders: list[str] = []
    options = SyncOptions(ssh_config=str(ssh_dir / "ssh_config"), chunk_mib=1, connect_timeout=5,
                          retry=RetryPolicy(attempts=2, base=0.2))
    report = distribute(str(src), "/data/pbad", [Host(joiner)], options, peers=[gone, older, corrupt],
                        on_transfer=lambda s, h, c: senders.append(s))
    assert report.path == "pipeline"
    [h] = report.hosts
    assert h.ok and h.attempts == 1, h                            # nothing charged to the joiner
    assert senders[0] == corrupt and set(senders) == {corrupt, LAUNCHER}, senders   # never `older` nor `gone`
    assert_host_has(sync_cluster, "worker-2", "/data/pbad", src)


def test_a_host_without_rsync_gets_sftp_from_the_launcher(sync_cluster, pod_ips, ssh_dir, tmp_path):
    """As on the parallel path and in the relay: the pipeline (here chosen by auto, with a
    peer) hands a host without rsync to SFTP from the launcher; --transport rsync refuses it."""
    src = make_dataset(tmp_path / "ds", small=20, big_mib=1)
    hosts = [pod_ips["worker-1"], pod_ips["worker-2"]]
    no_rsync = ["--remote-rsync", "/nonexistent/bin/rsync"]   # what the hosts lack, as rsync's --rsync-path
    proc, report = sync(ssh_dir, src, "/data/psftp", "--hosts", ",".join(hosts), "--peers", pod_ips["worker-0"],
                        "--transport", "rsync", *no_rsync)
    assert proc.returncode == 1 and report["path"] == "pipeline", proc.stderr
    assert all("no /nonexistent/bin/rsync on the host" in h["error"] for h in report["hosts"]), report
    proc, report = sync(ssh_dir, src, "/data/psftp", "--hosts", ",".join(hosts), "--peers", pod_ips["worker-0"],
                        *no_rsync)
    assert proc.returncode == 0, proc.stderr
    assert report["path"] == "pipeline"
    assert [(h["ok"], h["method"], h["source"]) for h in report["hosts"]] == [(True, "sftp", LAUNCHER)] * 2, report
    for pod in ("worker-1", "worker-2"):
        assert_host_has(sync_cluster, pod, "/data/psftp", src)


def test_only_the_host_without_rsync_gets_sftp_the_others_the_pipeline(sync_cluster, pod_ips, ssh_dir, tmp_path):
    """One pod of three has no rsync in its own filesystem (an image built without it): the
    pipeline copies that host by SFTP from the launcher, never uses it as a sender, and the
    two others by rsync chunk by chunk, one serving the other; every copy verifies."""
    src = make_dataset(tmp_path / "ds", small=40, big_mib=1)
    for i in range(4):                                            # several chunks: whole files of 1 MiB
        (src / f"part{i}.bin").write_bytes(os.urandom(2**20))
    bare, rest = "worker-1", ("worker-0", "worker-2")
    hosts = [pod_ips[name] for name in ("worker-0", "worker-1", "worker-2")]
    with rsync_hidden(sync_cluster, bare, tmp_path):
        proc, report = sync(ssh_dir, src, "/data/pmixed", "--hosts", ",".join(hosts), "--relay", "pipeline",
                            "--chunk-mib", "1")
        assert proc.returncode == 0, proc.stderr
        assert report["path"] == "pipeline", report
        by_host = hosts_by_name(report)
        assert (by_host[pod_ips[bare]]["ok"], by_host[pod_ips[bare]]["method"],
                by_host[pod_ips[bare]]["source"]) == (True, "sftp", LAUNCHER), report
        from_peers = 0
        for name in rest:
            h = by_host[pod_ips[name]]
            assert (h["ok"], h["method"]) == (True, "rsync"), report
            if h["source"] != LAUNCHER:                           # else every chunk from the launcher
                peers, chunks = _joiner_source(report, pod_ips[name])
                assert chunks >= 5, report
                from_peers += peers
        # the launcher sends one chunk at a time and a host serves the chunks it holds: of two
        # hosts that each need every chunk, one took some from the other (the host without
        # rsync serves none)
        assert from_peers >= 1, report
    for name in (bare, *rest):
        assert_host_has(sync_cluster, name, "/data/pmixed", src)
