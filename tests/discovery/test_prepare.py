"""``--prepare-cmd``: a host is served only after ``CMD -- HOST`` exits 0, once per pod uid."""
from __future__ import annotations

import sys
from pathlib import Path

from tests.daemons import fake_pod

PREPARE = r"""
import os, sys, time
logdir, sep, host = sys.argv[1:]  # the daemon appends "--" and the host
if sep != "--":
    sys.exit("no -- before the host: " + repr(sys.argv))
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
               "--prepare-retries", "0", "--prepare-recheck", "0")
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


FLAKY_PREPARE = r"""
import os, sys
logdir, sep, host = sys.argv[1:]
with open(os.path.join(logdir, "runs"), "a") as f:
    f.write(host + "\n")
if os.path.exists(os.path.join(logdir, "down-" + host)):
    print("ssh: connect to host " + host + ": Connection refused", file=sys.stderr)
    sys.exit(4)
"""


def test_a_pod_whose_preparation_failed_is_tried_again_until_it_is_served(cluster, daemon, tmp_path: Path) -> None:
    """A Ready pod whose preparation fails (its sshd not up yet, a network blip) is reported as
    skipped with the cause and when the next try comes, tried again at doubling intervals, and
    served, the same pod incarnation, once a try succeeds. Before, it was skipped for good: a
    healthy pod left without a worker for the rest of the run."""
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY_PREPARE)
    runs = tmp_path / "runs"
    (tmp_path / "down-10.9.2.5").touch()
    d = daemon(cluster, "--prepare-cmd", f"{sys.executable} {script} {tmp_path}",
               "--prepare-retries", "0", "--prepare-recheck", "0.2")
    d.wait_hosts([])
    fake_pod(cluster, "w-late", "10.9.2.5")

    def reason() -> str:
        skipped = d.json()["skipped"]
        return skipped[0]["reason"] if skipped else ""
    d.wait_for(lambda: "next try in 0.4 s" in reason(), 30, "a second failed try, the next one later")
    assert reason().startswith("prepare failed after 2 attempts: exit 4: ssh: connect to host 10.9.2.5")
    assert d.hosts() == []
    (tmp_path / "down-10.9.2.5").unlink()  # the cause passes
    d.wait_hosts(["10.9.2.5:1"])
    assert d.json()["skipped"] == []
    assert runs.read_text().splitlines().count("10.9.2.5") >= 3


ENV_PREPARE = r"""
import json, os, sys
out, sep, host = sys.argv[1:]
if sep != "--":
    sys.exit("no -- before the host: " + repr(sys.argv))
names = ("DISCOVERY_POD_UID", "DISCOVERY_POD_NAME", "DISCOVERY_POD_NAMESPACE")
with open(out, "a") as f:
    f.write(json.dumps({"host": host, **{n: os.environ.get(n) for n in names}}) + "\n")
"""


def test_prepare_command_is_told_the_pod_incarnation(cluster, daemon, tmp_path: Path) -> None:
    import json

    script = tmp_path / "prepare_env.py"
    script.write_text(ENV_PREPARE)
    out = tmp_path / "env.jsonl"

    def runs() -> list[dict]:
        return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []

    d = daemon(cluster, "--prepare-cmd", f"{sys.executable} {script} {out}")
    d.wait_hosts([])
    first = fake_pod(cluster, "w-env", "10.9.1.7")
    d.wait_hosts(["10.9.1.7:1"])
    assert runs() == [{"host": "10.9.1.7", "DISCOVERY_POD_UID": first["metadata"]["uid"],
                       "DISCOVERY_POD_NAME": "w-env", "DISCOVERY_POD_NAMESPACE": "default"}]
    # the same address given to a new pod: the command hears the new incarnation's uid
    cluster.delete_pod("w-env", grace_seconds=0)
    d.wait_hosts([])
    second = fake_pod(cluster, "w-env", "10.9.1.7")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    d.wait_hosts(["10.9.1.7:1"])
    assert [r["DISCOVERY_POD_UID"] for r in runs()] == [first["metadata"]["uid"], second["metadata"]["uid"]]


COUNT_PREPARE = r"""
import os, sys
logdir, sep, host = sys.argv[1:]
with open(os.path.join(logdir, "runs"), "a") as f:
    f.write(host + "\n")
"""


def test_a_restarted_daemon_admits_what_it_prepared_before(cluster, daemon, tmp_path: Path) -> None:
    """--admitted-file: a daemon started again with the same file (elastic-run restarting a
    crashed one, a restarted sidecar) serves the hosts it prepared at once, without running the
    command again (a host prepared again would leave the list meanwhile: a scale-down to
    horovodrun); a pod it never prepared, or a new incarnation, is prepared as before."""
    script = tmp_path / "count.py"
    script.write_text(COUNT_PREPARE)
    runs, admitted = tmp_path / "runs", tmp_path / "admitted-uids"
    flags = ("--prepare-cmd", f"{sys.executable} {script} {tmp_path}", "--admitted-file", str(admitted))

    def run_count(host: str) -> int:
        return runs.read_text().splitlines().count(host) if runs.exists() else 0

    first = daemon(cluster, *flags)
    fake_pod(cluster, "w-1", "10.9.0.1")
    first.wait_hosts(["10.9.0.1:1"])
    uid = cluster.client.get_pod("w-1", "default")["metadata"]["uid"]
    assert admitted.read_text().split() == [uid]
    first.proc.kill()
    first.proc.wait()

    admitted.write_text(admitted.read_text() + "not a uid!\n")  # a bad line is skipped, not fatal
    second = daemon(cluster, *flags)
    second.wait_hosts(["10.9.0.1:1"])
    assert run_count("10.9.0.1") == 1
    fake_pod(cluster, "w-2", "10.9.0.2")
    second.wait_hosts(["10.9.0.1:1", "10.9.0.2:1"])
    assert run_count("10.9.0.2") == 1
    cluster.delete_pod("w-1", grace_seconds=0)
    second.wait_hosts(["10.9.0.2:1"])
    second.wait_for(lambda: uid not in admitted.read_text(), 20, "the deleted pod's uid forgotten")


def test_admitted_file_needs_a_prepare_command(tmp_path: Path) -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "discovery.cli", "--selector", "app=x", "--admitted-file",
                           str(tmp_path / "a")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--admitted-file needs --prepare-cmd" in proc.stderr and "Traceback" not in proc.stderr
