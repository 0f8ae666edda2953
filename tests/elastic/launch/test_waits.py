"""Waits that explain themselves (elastic.launch.waits): which pods elastic-run waits for and
why each is not served yet; end to end, a run that waited also leaves a plot and says where
its outputs are."""
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from discovery.hosts import pods_to_hosts
from elastic.launch import plot
from elastic.launch.waits import PREPARING_TEXT, WaitExplainer, describe, explain
from elastic.launch.watch import DaemonWatch
from localcluster.testing import running_cluster
from shared.hosts_document import BadDocument, HostsDocument
from tests.elastic.launch.plothelp import svg_ids
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
SELECTOR = "app=elastic-horovod,role=worker"

DOC = {
    "synced": True, "pods_seen": 5,
    "hosts": [{"host": "10.0.0.1", "slots": 1, "pod": "worker-0"}],
    "waiting": {"not ready": 1, "not running": 1},
    "waiting_pods": [{"pod": "worker-2", "namespace": "default", "reason": "not running"},
                     {"pod": "worker-1", "namespace": "default", "reason": "not ready"}],
    "preparing": [{"host": "10.0.0.4", "pod": "worker-4", "uid": "u4"}],
    "skipped": [{"pod": "worker-3", "namespace": "default", "uid": "u3",
                 "reason": "bad annotation elastic-horovod/slots: 'many'"}],
}


def test_explain_names_every_pod_not_served_and_why():
    assert explain(HostsDocument.parse(DOC), 3) == [
        "waiting for hosts: 1 of the 3 slots --min-np needs are served (1 host)",
        "  worker-1: not ready",
        "  worker-2: not running",
        "  worker-3: skipped: bad annotation elastic-horovod/slots: 'many'",
        f"  worker-4 (10.0.0.4): {PREPARING_TEXT}",
    ]
    assert explain(HostsDocument.parse(DOC), 1) is None  # enough: nothing to explain


@pytest.mark.parametrize("doc, lines", [
    ({"synced": False}, ["waiting for hosts: the discovery daemon has not listed the pods yet"]),
    ({"hosts": [], "pods_seen": 0}, ["waiting for hosts: 0 of the 2 slots --min-np needs are served (0 hosts)",
                                     "  no pod matches the selector yet"]),
    # an older daemon without waiting_pods: the counts, by reason
    ({"hosts": [], "waiting": {"not ready": 2}}, ["waiting for hosts: 0 of the 2 slots --min-np needs are "
                                                  "served (0 hosts)",
                                                  "  ... and 2 more pods not served (2 not ready)"]),
    # names from the API are shown, never interpreted: control characters are replaced
    ({"hosts": [], "waiting_pods": [{"pod": "evil\x1b[2J", "reason": "not ready\n"}]},
     ["waiting for hosts: 0 of the 2 slots --min-np needs are served (0 hosts)", "  evil?[2J: not ready?"]),
])
def test_explain_edge_cases(doc, lines):
    assert explain(HostsDocument.parse(doc), 2) == lines


@pytest.mark.parametrize("doc, field", [
    ([], "the document is not a JSON object"),
    ({"hosts": [{"host": "10.0.0.1; rm -rf /", "slots": 1}]}, "hosts[0].host"),
    ({"hosts": [{"host": "10.0.0.1", "slots": 0}]}, "hosts[0].slots"),
    ({"hosts": [{"host": "10.0.0.1", "slots": True}]}, "hosts[0].slots"),
    ({"hosts": "10.0.0.1:1"}, "hosts is not a list"),
    ({"waiting_pods": [{"pod": 7, "reason": "x"}]}, "waiting_pods[0].pod"),
    ({"waiting": {"not ready": -1}}, "waiting['not ready']"),
    ({"synced": "yes"}, "synced"),
])
def test_a_malformed_document_is_refused_naming_its_field(doc, field):
    with pytest.raises(BadDocument, match=re.escape(field)):
        HostsDocument.parse(doc)
    assert describe(BadDocument(field), "http://d", 2) == [
        "waiting for hosts: the discovery daemon at http://d answered something that is not a hosts document "
        f"({field})"]


def test_the_document_round_trips():
    doc = HostsDocument.parse(DOC)
    assert HostsDocument.parse(doc.to_json()) == doc and doc.host_lines() == ("10.0.0.1:1",)


def test_the_daemon_rule_lists_the_waiting_pods_by_name():
    pods = [{"metadata": {"name": "worker-1", "namespace": "default", "uid": "u1"},
             "status": {"phase": "Pending"}},
            {"metadata": {"name": "worker-2", "namespace": "default", "uid": "u2"},
             "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}},
            {"metadata": {"name": "worker-0", "namespace": "default", "uid": "u0"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}]
    result = pods_to_hosts(pods)
    assert [(w.pod, w.reason) for w in result.waiting_pods] == [("worker-0", "not ready"),
                                                                ("worker-1", "not scheduled"),
                                                                ("worker-2", "not running")]
    assert dict(result.waiting) == {"not ready": 1, "not scheduled": 1, "not running": 1}


def test_the_explainer_says_a_state_once_and_stops_when_enough_hosts_are_served():
    said: list[str] = []
    explainer = WaitExplainer("http://daemon", 3, emit=said.append)
    waiting, enough = HostsDocument.parse(DOC), HostsDocument.parse({**DOC, "hosts": DOC["hosts"] * 3})
    explainer.see(1.0, waiting)
    explainer.see(2.0, waiting)
    assert said.count("  worker-1: not ready") == 1
    explainer.see(3.0, enough)
    assert explainer.satisfied and said[-1] == "enough hosts are served; horovodrun starts the workers"
    explainer.see(4.0, OSError("gone"))
    assert said[-1] == "enough hosts are served; horovodrun starts the workers"


def test_one_subscription_feeds_every_subscriber_and_its_stop_takes_one_last_look():
    """The host recorder and the explainer read the same answers; stop() looks once more: the
    hosts came, the job ran and ended between two looks."""
    from elastic.launch.watch import HostRecorder
    current: dict = {"doc": HostsDocument.parse(DOC)}
    looks: list[int] = []

    def fetch(url):
        looks.append(1)
        return current["doc"]

    said: list[str] = []
    watch = DaemonWatch("http://daemon", 3600, fetch=fetch)
    recorder, explainer = HostRecorder(), WaitExplainer("http://daemon", 3, emit=said.append)
    watch.subscribe(recorder.see)
    watch.subscribe(explainer.see)
    watch.start()
    wait_for(lambda: "  worker-1: not ready" in said, 30, "the first explanation")
    current["doc"] = HostsDocument.parse({**DOC, "hosts": DOC["hosts"] * 3})
    watch.stop()  # long before the next look
    assert said[-1] == "enough hosts are served; horovodrun starts the workers"
    assert [hosts for _, hosts in recorder.snapshots()] == [("10.0.0.1:1",), ("10.0.0.1:1",) * 3]
    assert len(looks) == 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("waits") / "cluster", workers=2) as c:
        yield c


@pytest.mark.horovod
def test_elastic_run_says_which_pods_it_waits_for_and_where_its_outputs_are(cluster, tmp_path):
    cluster.set_ready("worker-1", False)
    cluster.create_pod("worker-bad", annotations={"elastic-horovod/slots": "many"})
    cluster.create_pod("worker-elsewhere", node_name="elsewhere")  # never runs: stays Pending
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCOVERY_", "ELASTIC_"))}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    argv = [str(BIN / "elastic-run"), "--selector", SELECTOR, "--kubeconfig", str(cluster.kubeconfig),
            "--ssh-port", str(cluster.ssh_port), "--ssh-identity-file", str(cluster.identity),
            "--network-interface", "lo", "--min-np", "2", "--max-np", "2", "--elastic-timeout", "300",
            "--timeline-file", str(tmp_path / "timeline.json"), "--plot", str(tmp_path / "run.svg"),
            "--log-dir", str(tmp_path / "logs"),
            "--", "sh", "-c", "exit 0"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        text = lambda: "".join(lines)  # noqa: E731
        wait_for(lambda: all(s in text() for s in (
            "  worker-1: not ready", "  worker-elsewhere: not running",
            "  worker-bad: skipped: bad annotation elastic-horovod/slots")), 180, "the wait explained")
        # worker-0 is prepared (pinned) and served; the message changes with it
        wait_for(lambda: "waiting for hosts: 1 of the 2 slots --min-np needs are served (1 host)" in text(),
                 180, "worker-0 served")
        cluster.set_ready("worker-1", True)
        assert proc.wait(timeout=300) == 0, text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=30)
        proc.stderr.close()
        cluster.delete_pod("worker-bad")
        cluster.delete_pod("worker-elsewhere")
    out = "".join(lines)
    assert "enough hosts are served; horovodrun starts the workers" in out
    daemon_log = tmp_path / "logs" / "discovery-daemon.log"
    assert (f"outputs: plot {tmp_path / 'run.svg'}, timeline {tmp_path / 'timeline.json'}, "
            f"daemon log {daemon_log}") in out
    assert "worker-1" in daemon_log.read_text()  # kept, and it is the daemon's
    # the plot, from the driver's side alone (this training writes no metrics): the slots served
    # went 1 -> 2 as the hosts joined
    described = plot.read_description(tmp_path / "run.svg")
    assert described["series"]["slots_served"] == 2 and described["markers"]["join"] == 2
    assert described["series"]["loss"] == 0
    assert {"series-slots-served", "marker-join-0", "marker-join-1"} <= svg_ids(tmp_path / "run.svg")
