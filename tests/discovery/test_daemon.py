"""``discovery-daemon`` against the local cluster: what a user of /hosts relies on."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from discovery.server import ROUTES
from tests.daemons import ROOT, START_TIMEOUT, daemon_env, fake_pod

SLOTS = "elastic-horovod/slots"


def test_real_pods_served_once_ready_and_withdrawn_on_not_ready_and_deletion(cluster, daemon) -> None:
    d = daemon(cluster)
    d.wait_hosts([])
    cluster.create_pod("worker-1", annotations={SLOTS: "2"})
    cluster.create_pod("worker-2")
    ip1, ip2 = cluster.wait_ready("worker-1"), cluster.wait_ready("worker-2")
    d.wait_hosts(sorted([f"{ip1}:2", f"{ip2}:1"], key=lambda entry: entry != f"{ip1}:2"))
    cluster.set_ready("worker-1", False)
    d.wait_hosts([f"{ip2}:1"])
    cluster.set_ready("worker-1", True)
    d.wait_hosts([f"{ip1}:2", f"{ip2}:1"])
    cluster.delete_pod("worker-2")
    d.wait_hosts([f"{ip1}:2"])
    # a recreated pod is a new host to Horovod: new uid, new address
    cluster.wait_gone("worker-2")
    cluster.create_pod("worker-2")
    ip2b = cluster.wait_ready("worker-2")
    assert ip2b != ip2
    d.wait_hosts([f"{ip1}:2", f"{ip2b}:1"])


def test_host_withdrawn_at_deletion_start_while_the_pod_still_exists(cluster, daemon) -> None:
    fake_pod(cluster, "worker-1", "10.9.0.1")
    fake_pod(cluster, "worker-2", "10.9.0.2")
    d = daemon(cluster)
    d.wait_host_set(["10.9.0.1:1", "10.9.0.2:1"])
    cluster.delete_pod("worker-1", grace_seconds=60)
    d.wait_host_set(["10.9.0.2:1"])
    pod = cluster.client.get_pod("worker-1")
    assert pod["metadata"].get("deletionTimestamp")  # still there, terminating
    assert d.json()["waiting"] == {"terminating": 1}


def test_slots_rules_through_the_api(cluster, daemon) -> None:
    fake_pod(cluster, "annotated", "10.9.0.1", annotations={SLOTS: "4"})
    fake_pod(cluster, "gpus", "10.9.0.2", gpus=2)
    fake_pod(cluster, "annotation-beats-gpus", "10.9.0.3", annotations={SLOTS: "1"}, gpus=8)
    fake_pod(cluster, "plain", "10.9.0.4")
    fake_pod(cluster, "not-ready", "10.9.0.5", ready=False)
    fake_pod(cluster, "other-app", "10.9.0.6", labels={"app": "else"})
    d = daemon(cluster, "--default-slots", "3")
    d.wait_host_set(["10.9.0.1:4", "10.9.0.2:2", "10.9.0.3:1", "10.9.0.4:3"])
    doc = d.json()
    assert doc["pods_seen"] == 5 and doc["waiting"] == {"not ready": 1}
    assert {h["pod"]: h["slots"] for h in doc["hosts"]} == {
        "annotated": 4, "gpus": 2, "annotation-beats-gpus": 1, "plain": 3}


def test_bad_annotation_is_skipped_reported_and_recoverable(cluster, daemon) -> None:
    fake_pod(cluster, "good", "10.9.0.1")
    fake_pod(cluster, "bad", "10.9.0.2", annotations={SLOTS: "lots"})
    d = daemon(cluster)
    d.wait_host_set(["10.9.0.1:1"])
    skipped = d.json()["skipped"]
    assert [(s["pod"], "bad annotation elastic-horovod/slots" in s["reason"]) for s in skipped] == [("bad", True)]
    assert d.metric("discovery_pods_skipped") == 1
    assert any("pod skipped" in line and "lots" in line for line in d.lines)
    cluster.client.patch_pod("bad", {"metadata": {"annotations": {SLOTS: "2"}}}, "default", None,
                             "application/merge-patch+json")
    d.wait_host_set(["10.9.0.1:1", "10.9.0.2:2"])
    assert d.json()["skipped"] == [] and d.proc.poll() is None


def test_relist_after_410_keeps_the_cache_exact(cluster, daemon) -> None:
    fake_pod(cluster, "stays", "10.9.0.1")
    fake_pod(cluster, "goes", "10.9.0.2")
    d = daemon(cluster, "--stale-after", "30")
    d.wait_host_set(["10.9.0.1:1", "10.9.0.2:1"])
    assert d.json()["watch"]["relists"] == 0
    os.kill(d.proc.pid, signal.SIGSTOP)  # the daemon misses everything below
    try:
        assert cluster.drop_watches() >= 1
        cluster.delete_pod("goes", grace_seconds=0)   # a DELETED event it never sees
        fake_pod(cluster, "comes", "10.9.0.3")
        cluster.compact_history()                     # resuming from its version -> 410
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    d.wait_host_set(["10.9.0.1:1", "10.9.0.3:1"])
    doc = d.json()
    assert doc["watch"]["relists"] == 1 and doc["pods_seen"] == 2
    assert d.metric("discovery_relists_total") == 1


def test_api_outage_keeps_the_list_reports_staleness_and_recovers(cluster, daemon) -> None:
    fake_pod(cluster, "worker-1", "10.9.0.1")
    d = daemon(cluster, "--stale-after", "0.5")
    d.wait_host_set(["10.9.0.1:1"])
    assert d.get("/readyz")[0] == 200
    cluster.restart_api(down_seconds=4)
    d.wait_for(lambda: d.get("/readyz")[0] == 503, 10, "readyz 503 during the outage")
    status, headers, body = d.get("/hosts")
    assert status == 200 and body == "10.9.0.1:1\n"  # never empty because the API is gone
    assert float(headers["x-discovery-age"]) > 0.5 and headers["x-discovery-stale"] == "1"
    doc = d.json()
    assert doc["stale"] and doc["age_seconds"] > 0.5 and not doc["watch"]["connected"]
    assert "stale for" in d.get("/readyz")[2]
    d.wait_for(lambda: d.get("/readyz")[0] == 200, 30, "recovery")
    assert d.json()["age_seconds"] == 0 and d.metric("discovery_watch_restarts_total") >= 1
    fake_pod(cluster, "worker-2", "10.9.0.2")  # the watch works again
    d.wait_host_set(["10.9.0.1:1", "10.9.0.2:1"])


def test_group_by_serves_each_job_separately(cluster, daemon) -> None:
    fake_pod(cluster, "a-1", "10.9.0.1", labels={"app": "elastic-horovod", "role": "worker", "job": "a"})
    fake_pod(cluster, "a-2", "10.9.0.2", labels={"app": "elastic-horovod", "role": "worker", "job": "a"})
    fake_pod(cluster, "b-1", "10.9.0.3", labels={"app": "elastic-horovod", "role": "worker", "job": "b"})
    fake_pod(cluster, "none", "10.9.0.4")
    d = daemon(cluster, "--group-by", "job")
    d.wait_host_set(["10.9.0.1:1", "10.9.0.2:1"], group="a")
    assert d.hosts("b") == ["10.9.0.3:1"]
    assert d.hosts("c") == []
    status, _, body = d.get("/hosts")
    assert status == 400 and "group required" in body
    assert [h["pod"] for h in d.json("/hosts.json?group=a")["hosts"]] == ["a-1", "a-2"]
    cluster.delete_pod("a-1", grace_seconds=0)
    d.wait_host_set(["10.9.0.2:1"], group="a")
    assert d.hosts("b") == ["10.9.0.3:1"]


def test_hostfile_follows_changes_and_is_never_partial(cluster, daemon, tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    for i in range(1, 41):
        fake_pod(cluster, f"w-{i}", f"10.9.0.{i}")
    d = daemon(cluster, "--hostfile", str(hostfile))
    full = sorted(f"10.9.0.{i} slots=1" for i in range(1, 41))
    d.wait_for(lambda: hostfile.exists() and sorted(hostfile.read_text().splitlines()) == full, 20,
               "full hostfile")
    line = re.compile(r"10\.9\.0\.\d+ slots=1")
    bad: list[str] = []
    reads = 0
    done = threading.Event()

    def reader() -> None:
        nonlocal reads
        while not done.is_set():
            text = hostfile.read_text()
            reads += 1
            if text and (not text.endswith("\n") or not all(line.fullmatch(entry) for entry in text.splitlines())):
                bad.append(text)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(1, 41, 2):
            cluster.set_ready(f"w-{i}", False)
        d.wait_for(lambda: hostfile.read_text().count("\n") == 20, 20, "half the hosts")
    finally:
        done.set()
        t.join()
    assert not bad and reads > 10
    assert sorted(hostfile.read_text().splitlines()) == sorted(f"10.9.0.{i} slots=1" for i in range(2, 41, 2))


def test_token_required_off_loopback_and_enforced(cluster, daemon) -> None:
    r = subprocess.run([sys.executable, "-m", "discovery.cli", "--kubeconfig", str(cluster.kubeconfig),
                        "--selector", "app=x", "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, env=daemon_env(), cwd=ROOT, timeout=60)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["error: listening on non-loopback address '0.0.0.0' requires "
                                     "--token (or DISCOVERY_TOKEN)"]
    fake_pod(cluster, "w", "10.9.0.1")
    d = daemon(cluster, token="s3cret")
    d.wait_host_set(["10.9.0.1:1"])
    assert d.get("/hosts")[0] == 401
    assert d.get("/hosts", token="wrong")[0] == 401
    assert d.get("/metrics")[0] == 401
    assert d.get("/healthz")[0] == 200 and d.get("/readyz")[0] == 200  # probes stay open


@pytest.mark.parametrize("flags, start", [
    (["--selector", ""], "error: --selector (or DISCOVERY_SELECTOR) is required"),
    (["--selector", "a=b", "--kubeconfig", "{tmp}/nope"], "error: kubeconfig"),
    (["--selector", "a=b", "--default-slots", "0"], "error: default slots must be"),
    (["--selector", "a=b", "--port", "http"], "error: --port must be an integer"),
])
def test_bad_settings_fail_with_one_line(tmp_path: Path, flags: list[str], start: str) -> None:
    flags = [f.format(tmp=tmp_path) for f in flags]
    r = subprocess.run([sys.executable, "-m", "discovery.cli", "--port", "0", *flags],
                       capture_output=True, text=True, env=daemon_env(), cwd=ROOT, timeout=60)
    assert r.returncode == 2, (flags, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(start), r.stderr


def test_a_selector_the_api_rejects_ends_the_daemon_with_exit_1(cluster, daemon) -> None:
    d = daemon(cluster, selector="app in (", wait=False)  # the API rejects it: 400
    assert d.proc.wait(START_TIMEOUT) == 1  # it starts (imports), then the API answers 400
    d._reader.join(60)
    assert d.lines[-1].startswith("error: watch stopped: list pods: HTTP 400")


def test_sigterm_stops_gracefully(cluster, daemon) -> None:
    d = daemon(cluster)
    d.wait_hosts([])
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0
    assert any('"msg": "stopping"' in line for line in d.lines)
    assert not [line for line in d.lines if "Traceback" in line]


def test_metrics_echo_what_is_served_and_nothing_a_client_sent(cluster, daemon) -> None:
    """/metrics reports the served state (pods seen, hosts served, skipped by reason kind,
    synced) and never echoes client input: paths it does not serve count as path="other"."""
    fake_pod(cluster, "good", "10.9.0.1")
    fake_pod(cluster, "bad", "10.9.0.2", annotations={SLOTS: "x-pod-value"})
    d = daemon(cluster)
    d.wait_host_set(["10.9.0.1:1"])
    for path in ("/hosts", "/hosts.json", "/x-injected-path", "/hosts?group=x-injected-group"):
        d.get(path)
    status, headers, body = d.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in body.splitlines() if line and not line.startswith("#")}
    assert samples["discovery_pods_seen"] == 2 and samples["discovery_hosts_served"] == 1
    assert samples['discovery_pods_skipped{reason="bad annotation elastic-horovod/slots"}'] == 1
    assert samples["discovery_synced"] == 1
    paths = {m.group(1) for k in samples if (m := re.match(r'discovery_request_seconds_count\{path="([^"]*)"\}', k))}
    assert paths <= {*ROUTES, "other"} and {"/hosts", "/hosts.json", "other"} <= paths
    assert "injected" not in body
    assert "x-pod-value" not in body
