"""The pure pods -> hosts rule, as a table of cases."""
from __future__ import annotations

import pytest

from discovery.hosts import Host, Rules, Skipped, Waiting, classify, parse_slots, pods_to_hosts, render_lines
from tests.discovery.podspec import pod

SLOTS = "elastic-horovod/slots"

# (case id, pod, rules, expected: "host:slots" | ("waiting", reason) | ("skipped", reason part))
CASES = [
    ("ready pod is a host", pod(), Rules(), "10.0.0.1:1"),
    ("default slots", pod(), Rules(default_slots=3), "10.0.0.1:3"),
    ("pending", pod(phase="Pending"), Rules(), ("waiting", "not running")),
    ("succeeded", pod(phase="Succeeded"), Rules(), ("waiting", "not running")),
    ("not ready", pod(ready="False"), Rules(), ("waiting", "not ready")),
    ("no ready condition", pod(ready=None), Rules(), ("waiting", "not ready")),
    ("terminating", pod(deleting=True), Rules(), ("waiting", "terminating")),
    ("terminating beats everything", pod(deleting=True, annotations={SLOTS: "x"}), Rules(),
     ("waiting", "terminating")),
    ("no IP", pod(ip=None), Rules(), ("waiting", "no pod IP")),
    ("annotation", pod(annotations={SLOTS: "4"}), Rules(), "10.0.0.1:4"),
    ("annotation with spaces", pod(annotations={SLOTS: " 2 "}), Rules(), "10.0.0.1:2"),
    ("annotation beats GPUs", pod(annotations={SLOTS: "2"}, gpus=["8"]), Rules(), "10.0.0.1:2"),
    ("bad annotation word", pod(annotations={SLOTS: "four"}), Rules(),
     ("skipped", "bad annotation elastic-horovod/slots")),
    ("bad annotation zero", pod(annotations={SLOTS: "0"}), Rules(), ("skipped", "out of range")),
    ("bad annotation negative", pod(annotations={SLOTS: "-1"}), Rules(),
     ("skipped", "not a positive integer")),
    ("bad annotation float", pod(annotations={SLOTS: "1.5"}), Rules(), ("skipped", "not a positive")),
    ("bad annotation empty", pod(annotations={SLOTS: ""}), Rules(), ("skipped", "not a positive")),
    ("bad annotation unicode digit", pod(annotations={SLOTS: "٣"}), Rules(), ("skipped", "not a positive")),
    ("bad annotation huge", pod(annotations={SLOTS: "99999"}), Rules(), ("skipped", "out of range")),
    ("GPU limit", pod(gpus=["2"]), Rules(default_slots=5), "10.0.0.1:2"),
    ("GPU limits summed", pod(gpus=["2", None, 1]), Rules(), "10.0.0.1:3"),
    ("zero GPUs -> default", pod(gpus=["0"]), Rules(default_slots=2), "10.0.0.1:2"),
    ("bad GPU limit", pod(gpus=["1.5"]), Rules(), ("skipped", "bad nvidia.com/gpu limit")),
    ("address name", pod(name="worker-3"), Rules(address="name"), "worker-3:1"),
    ("address dns", pod(hostname="w0", subdomain="job", ns="ml"), Rules(address="dns"),
     "w0.job.ml.svc.cluster.local:1"),
    ("address dns, other domain", pod(hostname="w0", subdomain="job"),
     Rules(address="dns", cluster_domain="k.example"), "w0.job.default.svc.k.example:1"),
    ("address dns without subdomain", pod(hostname="w0"), Rules(address="dns"),
     ("skipped", "--address dns")),
    ("IPv6 pod IP served by DNS name", pod(ip="fd00::5", hostname="w0", subdomain="job"), Rules(),
     "w0.job.default.svc.cluster.local:1"),
    ("IPv6 pod IP without a DNS name", pod(ip="fd00::5"), Rules(),
     ("skipped", "IPv6 pod IP needs a DNS name")),
    ("group label", pod(labels={"job": "a"}), Rules(group_by="job"), "10.0.0.1:1"),
    ("no group label", pod(labels={}), Rules(group_by="job"), ("waiting", "no group label")),
]


@pytest.mark.parametrize("case,p,rules,expected", CASES, ids=[c[0] for c in CASES])
def test_rule(case: str, p: dict, rules: Rules, expected: object) -> None:
    v = classify(p, rules)
    if isinstance(expected, str):
        assert isinstance(v, Host), v
        assert v.line() == expected
    else:
        kind, reason = expected
        assert isinstance(v, Waiting if kind == "waiting" else Skipped), v
        assert reason in v.reason


@pytest.mark.parametrize("junk", [{}, {"metadata": None}, {"status": "x"}, {"metadata": {"name": 1}},
                                  {"status": {"phase": "Running", "conditions": "nope"}}])
def test_malformed_pods_never_raise(junk: dict) -> None:
    assert isinstance(classify(junk, Rules()), Waiting)


def test_order_is_stable_by_creation_then_name() -> None:
    pods = [pod("b", ip="10.0.0.2", created="2026-01-01T00:00:05Z"),
            pod("c", ip="10.0.0.3", created="2026-01-01T00:00:01Z"),
            pod("a", ip="10.0.0.1", created="2026-01-01T00:00:05Z")]
    out = pods_to_hosts(pods)
    assert [h.pod for h in out.hosts] == ["c", "a", "b"]
    assert pods_to_hosts(list(reversed(pods))).hosts == out.hosts
    assert render_lines(out.hosts) == "10.0.0.3:1\n10.0.0.1:1\n10.0.0.2:1\n"


def test_result_reports_skipped_and_counts_waiting() -> None:
    out = pods_to_hosts([pod("ok"), pod("bad", ip="10.0.0.9", annotations={SLOTS: "x"}),
                         pod("p1", phase="Pending"), pod("p2", phase="Pending"), pod("nr", ready="False")])
    assert [h.pod for h in out.hosts] == ["ok"]
    assert [(s.pod, "bad annotation" in s.reason) for s in out.skipped] == [("bad", True)]
    assert dict(out.waiting) == {"not running": 2, "not ready": 1}


def test_duplicate_host_names_are_skipped_not_served_twice() -> None:
    out = pods_to_hosts([pod("w", ns="a"), pod("w", ns="b", ip="10.0.0.2")], Rules(address="name"))
    assert [h.line() for h in out.hosts] == ["w:1"]
    assert "duplicate host" in out.skipped[0].reason


def test_same_host_in_two_groups_is_fine() -> None:
    out = pods_to_hosts([pod("w", ns="a", labels={"job": "x"}),
                         pod("w", ns="b", ip="10.0.0.2", labels={"job": "y"})],
                        Rules(address="name", group_by="job"))
    assert sorted((h.group, h.host) for h in out.hosts) == [("x", "w"), ("y", "w")]


@pytest.mark.parametrize("kw,msg", [({"default_slots": 0}, "default slots"),
                                    ({"address": "ipv4"}, "address must be"),
                                    ({"group_by": ""}, "group-by"),
                                    ({"cluster_domain": ""}, "cluster domain")])
def test_rules_reject_bad_settings_naming_the_value(kw: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        Rules(**kw)


def test_parse_slots() -> None:
    assert parse_slots("8") == 8
    with pytest.raises(ValueError, match="not a string: 8"):
        parse_slots(8)  # annotations are strings


def _status(pod_: dict, **status) -> dict:
    pod_["status"].update(status)
    return pod_


def _crashing(restarts: int = 4) -> dict:
    return {"name": "worker", "ready": False, "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}


# (case id, pod, expected reason, a part of the detail): why a pod is not served, told apart
# finely enough for the launcher to tell a lack of capacity from failing workers
WAITING_CASES = [
    ("unscheduled: no node, the scheduler's word", _status(pod(phase="Pending", ready=None), conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]),
     "not scheduled", "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    ("not yet seen by the scheduler", pod(phase="Pending", ready=None), "not scheduled", ""),
    ("placed, pulling its image", _status(pod(phase="Pending"), containerStatuses=[
        {"name": "worker", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]),
     "not running", "container worker ContainerCreating"),
    ("placed, image pull failing", _status(pod(phase="Pending"), containerStatuses=[
        {"name": "worker", "ready": False, "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off pulling image "r/x:1"'}}}]),
     "failing", 'container worker ImagePullBackOff: Back-off pulling image "r/x:1"'),
    ("an init container crash-looping", _status(pod(phase="Pending"), initContainerStatuses=[_crashing(2)]),
     "failing", "container worker CrashLoopBackOff (2 restarts, last exit 1 (Error))"),
    ("running, crash-looping", _status(pod(ready="False"), containerStatuses=[_crashing()]),
     "failing", "container worker CrashLoopBackOff (4 restarts, last exit 1 (Error)): back-off 40s"),
    ("running, not ready, restarted", _status(pod(ready="False"), containerStatuses=[
        {"name": "worker", "ready": False, "restartCount": 1, "state": {"running": {}}}]),
     "not ready", "container worker 1 restarts"),
    ("pod failed", _status(pod(phase="Failed", ready="False"), reason="Evicted", message="low on ephemeral-storage"),
     "failing", "pod Failed: Evicted: low on ephemeral-storage"),
    ("a hostile message is printable and short", _status(pod(phase="Pending"), containerStatuses=[
        {"name": "w", "state": {"waiting": {"reason": "CreateContainerError", "message": "x\n\x1b[2J" + "y" * 500}}}]),
     "failing", "container w CreateContainerError: x  [2Jyyy"),
]


@pytest.mark.parametrize("case, pod_, reason, detail", WAITING_CASES, ids=[c[0] for c in WAITING_CASES])
def test_why_a_pod_waits(case, pod_, reason, detail):
    v = classify(pod_, Rules())
    assert isinstance(v, Waiting) and v.reason == reason
    assert v.detail.startswith(detail) if detail else v.detail == ""
    assert len(v.detail) <= 200 and v.detail.isprintable()
