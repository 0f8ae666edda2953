"""``--prepare-cmd``: a host is served only after ``CMD HOST`` exits 0, once per pod uid."""
from __future__ import annotations

import sys
from pathlib import Path

from tests.discovery.conftest import fake_pod

PREPARE = r"""
import os, sys, time
logdir, host = sys.argv[1], sys.argv[2]
with open(os.path.join(logdir, "runs"), "a") as f:
    f.write(host + "\n")
if host.endswith(".66"):
    print("cannot reach " + host, file=sys.stderr)
    sys.exit(4)
release = os.path.join(logdir, "release-" + host)
while not os.path.exists(release):   # the test decides when preparation finishes
    time.sleep(0.02)
"""


def test_host_served_only_after_prepare_succeeds_once_per_uid(cluster, daemon, tmp_path: Path) -> None:
    script = tmp_path / "prepare.py"
    script.write_text(PREPARE)
    runs = tmp_path / "runs"

    def run_count(host: str) -> int:
        return runs.read_text().splitlines().count(host) if runs.exists() else 0

    d = daemon(cluster, "--prepare-cmd", f"{sys.executable} {script} {tmp_path}",
               "--prepare-retries", "0")
    d.wait_hosts([])
    fake_pod(cluster, "w-1", "10.9.0.1")
    fake_pod(cluster, "w-bad", "10.9.0.66")
    d.wait_for(lambda: run_count("10.9.0.1") == 1, 20, "prepare started")
    doc = d.json()
    assert doc["hosts"] == [] and "w-1" in [p["pod"] for p in doc["preparing"]]
    assert d.hosts() == []  # running, not yet exited: not served
    (tmp_path / "release-10.9.0.1").touch()
    d.wait_hosts(["10.9.0.1:1"])
    d.wait_for(lambda: d.json()["skipped"], 20, "failed prepare reported")
    assert [(s["pod"], s["reason"]) for s in d.json()["skipped"]] == [
        ("w-bad", "prepare failed after 1 attempts: exit 4: cannot reach 10.9.0.66")]
    assert d.metric("discovery_prepare_failures_total") == 1
    # Ready -> NotReady -> Ready: the same incarnation, not prepared again
    cluster.set_ready("w-1", False)
    d.wait_hosts([])
    cluster.set_ready("w-1", True)
    d.wait_hosts(["10.9.0.1:1"])
    assert run_count("10.9.0.1") == 1
    # deleted and recreated: a new uid, prepared again before it is served
    (tmp_path / "release-10.9.0.1").unlink()
    cluster.delete_pod("w-1", grace_seconds=0)
    d.wait_hosts([])
    fake_pod(cluster, "w-1", "10.9.0.1")
    d.wait_for(lambda: run_count("10.9.0.1") == 2, 20, "second prepare")
    assert d.hosts() == []
    (tmp_path / "release-10.9.0.1").touch()
    d.wait_hosts(["10.9.0.1:1"])
    assert run_count("10.9.0.66") == 1
