"""Dataset relay: the pure plan, and relay runs against the local cluster's pods (real sshd,
real rsync daemons on the pods' addresses, each pod its own /data)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from elastic.common.hostlist import Host
from elastic.errors import ConfigError
from elastic.sync.manifest import MANIFEST_NAME, Manifest, build_manifest
from elastic.sync.relay import LAUNCHER, RelaySchedule, assign, choose_path, serve_script
from elastic.sync.remote import Layout
from elastic.sync.retry import RetryPolicy
from elastic.sync.service import SyncOptions
from tests.elastic.conftest import assert_host_has, hosts_by_name, make_dataset, pods_with_ssh, sync, wait_for

# -- pure --------------------------------------------------------------------------------------

def test_auto_takes_the_pipeline_above_a_few_hosts_or_with_peers() -> None:
    assert choose_path("auto", 4) == "parallel" and choose_path("auto", 5) == "pipeline"
    assert choose_path("auto", 1, peers=2) == "pipeline"
    assert choose_path("auto", 16, peers=2, transport="sftp") == "parallel"    # no host relays without rsync
    assert choose_path("auto", 16, transport="rsync") == "pipeline"
    assert choose_path("on", 1) == "relay" and choose_path("off", 16, peers=3) == "parallel"
    assert choose_path("pipeline", 1) == "pipeline"
    with pytest.raises(ConfigError, match="--relay must be one of auto, on, off, pipeline, got 'maybe'"):
        choose_path("maybe", 3)
    with pytest.raises(ConfigError, match="--relay pipeline needs rsync on the hosts; not with --transport sftp"):
        choose_path("pipeline", 3, transport="sftp")


def _equal_time_rounds(schedule: RelaySchedule) -> list[list[tuple[str, str]]]:
    """Drive the real scheduler as if every copy took the same time and succeeded."""
    rounds = []
    while not schedule.finished:
        pairs = schedule.next_pairs()
        for sender, host in pairs:
            schedule.succeeded(host, sender)
        rounds.append(pairs)
    return rounds


def test_the_schedule_doubles_the_holders_each_round() -> None:
    hosts = [f"h{i}" for i in range(16)]
    rounds = _equal_time_rounds(RelaySchedule(hosts))
    assert [len(r) for r in rounds] == [1, 2, 4, 8, 1]  # 16 hosts in 5 copy times
    assert rounds[0] == [(LAUNCHER, "h0")] and rounds[1] == [("h0", "h1"), (LAUNCHER, "h2")]  # peers first
    assert sorted(h for r in rounds for _, h in r) == sorted(hosts)
    assert len(_equal_time_rounds(RelaySchedule(hosts, [LAUNCHER, "p1", "p2", "p3"]))) == 3  # peers that hold it


def test_the_schedule_retries_from_another_sender_and_drops_a_dead_one() -> None:
    s = RelaySchedule(["x", "y"], [LAUNCHER, "p"])
    assert s.next_pairs() == [("p", "x"), (LAUNCHER, "y")]
    s.failed("x", "p", dead=True)  # p's copy was bad: it serves no one any more
    assert s.next_pairs() == []  # the launcher is busy, p is dead
    s.succeeded("y", LAUNCHER)
    assert s.next_pairs() == [("y", "x")] and s.attempts == {"x": 2, "y": 1}
    s.failed("x", "y", retry=False)  # given up
    assert s.finished and "p" not in s.free and "y" in s.free


def test_the_schedule_tries_again_when_every_live_sender_failed_a_host() -> None:
    s = RelaySchedule(["x"], ["p"])
    assert s.next_pairs() == [("p", "x")]
    s.failed("x", "p")
    assert s.next_pairs() == [("p", "x")]  # nothing runs: the refusals are forgotten
    assert s.give_up_pending() == [] and s.running == 1


def test_assign_prefers_peers_and_skips_refused_senders() -> None:
    assert assign([LAUNCHER, "a"], ["x", "y", "z"], {}) == [("a", "x"), (LAUNCHER, "y")]
    assert assign([LAUNCHER, "a"], ["x", "y"], {"x": {"a"}}) == [(LAUNCHER, "x"), ("a", "y")]
    assert assign(["a"], ["x"], {"x": {"a"}}) == []


def test_serve_script_is_read_only_and_keeps_the_secret_off_the_command_line() -> None:
    script = serve_script(Layout("/data/ds"), "ab" * 32, "127.0.0.5", 23456, ["127.0.0.6", "dns.name"], 512)
    assert "read only = yes" in script and "hosts allow = 127.0.0.6\n" in script
    assert "--address=127.0.0.5 --port=23456 --bwlimit=512" in script
    assert "read -r secret" in script and "refuse options = copy-links" in script


# -- against pods ------------------------------------------------------------------------------

def test_relay_serves_hosts_from_peers_and_every_copy_is_verified(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=40, big_mib=2)
    ips = list(pod_ips.values())
    proc, report = sync(ssh_dir, src, "/data/relay", "--hosts", ",".join(ips), "--relay", "on")
    assert proc.returncode == 0, proc.stderr
    sources = {h["host"]: h["source"] for h in report["hosts"]}
    # some host was served by a peer
    assert list(sources.values()).count(LAUNCHER) < len(ips), proc.stderr + proc.stdout
    assert all(s in (LAUNCHER, *ips) and s != h for h, s in sources.items())
    assert "SOURCE" in proc.stdout
    for pod in pod_ips:
        assert_host_has(sync_cluster, pod, "/data/relay", src)


def test_late_joiner_is_served_by_a_peer_in_the_relay(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=30, big_mib=1)
    first = [pod_ips["worker-0"], pod_ips["worker-1"]]
    proc, _ = sync(ssh_dir, src, "/data/late", "--hosts", ",".join(first), "--relay", "off")
    assert proc.returncode == 0, proc.stderr
    # what the daemon's prepare hook runs for a new host: the job's pinned hosts are the peers
    proc, report = sync(ssh_dir, src, "/data/late", "--host", pod_ips["worker-2"], "--relay", "on",
                        "--peers-file", str(ssh_dir / "hostfile"))
    assert proc.returncode == 0, proc.stderr
    joined = hosts_by_name(report)[pod_ips["worker-2"]]
    assert joined["source"] in first and joined["attempts"] == 1
    assert_host_has(sync_cluster, "worker-2", "/data/late", src)


def test_prepare_hook_passes_the_pinned_hosts_as_peers() -> None:
    from elastic.prepare import hook as prepare

    seen = []
    original = prepare._run
    prepare._run = lambda argv, what, error: seen.append(argv)
    try:
        prepare.prepare("127.0.0.9", "/id", "/ssh", 2222, "/src:/data/x")
    finally:
        prepare._run = original
    argv = seen[-1]
    flag = argv.index("--peers-file")
    assert argv[flag + 1] == "/ssh/hostfile"
    assert argv[-3:] == ["--", "/src", "/data/x"]  # the pod-controlled host never after the "--"


def test_corrupted_peer_copy_is_refused_and_retried_from_another_source(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=30, big_mib=1)
    peer, child = pod_ips["worker-0"], pod_ips["worker-1"]
    proc, _ = sync(ssh_dir, src, "/data/corrupt", "--host", peer)
    assert proc.returncode == 0, proc.stderr
    # damage the peer's copy without changing size or mtime: its quick check still passes
    version = sync_cluster.ssh("worker-0", "readlink /data/corrupt").stdout.strip()
    bad = sync_cluster.pod_data_dir("worker-0") / version / "class03" / "img0003.bin"
    st = bad.stat()
    bad.write_bytes(bytes(b ^ 0xFF for b in bad.read_bytes()))
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc, report = sync(ssh_dir, src, "/data/corrupt", "--host", child, "--peers", peer, "--relay", "on")
    assert proc.returncode == 0, proc.stderr
    h = hosts_by_name(report)[child]
    assert (h["source"], h["attempts"]) == (LAUNCHER, 2)
    assert "does not match the manifest" in proc.stderr and f"from {peer}" in proc.stderr
    assert_host_has(sync_cluster, "worker-1", "/data/corrupt", src)


def test_relay_host_deleted_mid_copy_costs_its_child_a_retry(sync_cluster, tmp_path, monkeypatch):
    from elastic.sync.relay_run import distribute

    names = ["relay-a", "relay-b", "relay-c"]
    ips, ssh = pods_with_ssh(sync_cluster, tmp_path, names)
    src = make_dataset(tmp_path / "ds", small=10, big_mib=6)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # in-process dataset-sync's hash cache
    a, b, c = (ips[n] for n in names)
    started: list[tuple[str, str]] = []
    boards = []
    result = {}
    options = SyncOptions(ssh_config=str(ssh / "ssh_config"), bwlimit_kbps=1024,
                          retry=RetryPolicy(attempts=3, base=0.2))

    def run() -> None:
        result["report"] = distribute(str(src), "/data/relaykill", [Host(a), Host(b), Host(c)], options,
                                      relay="on", on_assign=lambda s, h: started.append((s, h)),
                                      board_hook=boards.append)

    t = threading.Thread(target=run)
    t.start()
    # a's copy from the launcher, then b pulls from a: delete a once b has bytes from it
    wait_for(lambda: (a, b) in started, 180, "b to start pulling from a")
    wait_for(lambda: boards[0].snapshot()[b].bytes_sent > 0, 120, "b to receive bytes from a")
    sync_cluster.delete_pod("relay-a", grace_seconds=0)
    t.join(300)
    assert not t.is_alive()
    report = result["report"]
    out = {h.host: h for h in report.hosts}
    assert out[a].ok and out[a].source == LAUNCHER
    assert out[b].ok and out[b].source in (LAUNCHER, c) and out[b].attempts == 2
    assert out[c].ok
    for n in ("relay-b", "relay-c"):
        assert_host_has(sync_cluster, n, "/data/relaykill", src)


def _linked_tree(root: Path, symlinks: str) -> Path:
    """A dataset of links for ``--symlinks symlinks``: relative links inside the tree (to a
    file, to a directory, from a subdirectory upwards) and, where the mode takes them, links
    out of it (absolute to a directory, relative climbing out to a file, and for ``keep`` one
    that looks like a link an rsync daemon munged)."""
    outside = root / "outside"
    (outside / "images").mkdir(parents=True)
    (outside / "images" / "a.bin").write_bytes(b"a" * 1000)
    (outside / "labels.csv").write_bytes(b"a,0\n")
    src = root / "ds"
    (src / "sub").mkdir(parents=True)
    (src / "own.bin").write_bytes(b"own" * 100)
    (src / "sub" / "deep.bin").write_bytes(b"deep" * 50)
    (src / "latest").symlink_to("own.bin")
    (src / "subdir").symlink_to("sub")
    (src / "sub" / "up").symlink_to("../own.bin")
    if symlinks != "refuse":
        (src / "images").symlink_to(outside / "images")
        (src / "labels.csv").symlink_to(Path("..") / "outside" / "labels.csv")
    if symlinks == "keep":  # what an rsync daemon that munges links would strip: sent as written
        (src / "munged").symlink_to("/rsyncd-munged/own.bin")
    return src


@pytest.mark.parametrize(("relay", "symlinks"), [("on", "keep"), ("on", "copy-unsafe"), ("on", "refuse"),
                                                 ("pipeline", "keep"), ("pipeline", "copy-unsafe")])
def test_relay_copies_links_as_the_symlinks_mode_says(sync_cluster, pod_ips, ssh_dir, tmp_path, relay, symlinks):
    """A host served by a peer gets the links the manifest lists, as links, first time: the
    pull from the peer keeps what the push from the launcher keeps (``keep``: links out of the
    tree too); the pipeline makes them on each host from the manifest."""
    src = _linked_tree(tmp_path, symlinks)
    manifest = build_manifest(str(src), symlinks=symlinks)
    if symlinks == "keep":
        assert {"images", "labels.csv", "munged"} <= set(manifest.links)
    dest = f"/data/relay-links-{relay}-{symlinks}"
    ips = list(pod_ips.values())
    proc, report = sync(ssh_dir, src, dest, "--hosts", ",".join(ips), "--relay", relay, "--symlinks", symlinks,
                        "--retries", "1")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    hosts = hosts_by_name(report)
    if relay == "on":
        assert any(h["source"] in ips for h in hosts.values()), report  # a peer served someone
    assert all(h["attempts"] == 1 for h in hosts.values()), report
    assert "does not match the manifest" not in proc.stderr
    for pod in pod_ips:
        out = sync_cluster.ssh(pod, f"cd {dest}/ && find . -type l -printf '%P\\t%l\\n' && "
                                    f"cat {MANIFEST_NAME}", timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        listed, _, document = out.stdout.partition("{")
        links = dict(line.split("\t") for line in listed.splitlines())
        assert links == manifest.links, pod
        assert Manifest.from_json("{" + document).digest == manifest.digest
