"""The pod cache: events, relist diff (vanished pods become deletions), slim copies."""
from __future__ import annotations

import pytest

from discovery.cache import PodCache, slim_pod
from discovery.hosts import Rules, pods_to_hosts
from tests.discovery.podspec import pod


def test_events_add_modify_delete() -> None:
    c = PodCache()
    assert c.apply("ADDED", pod("a", rv="1"))
    assert c.apply("MODIFIED", pod("a", rv="2", ready="False"))
    v, pods = c.snapshot()
    assert len(pods) == 1 and pods[0]["metadata"]["resourceVersion"] == "2"
    assert c.apply("DELETED", pod("a", rv="3"))
    assert not c.apply("DELETED", pod("a", rv="3"))
    assert c.snapshot()[1] == ()
    with pytest.raises(ValueError, match="BOGUS"):
        c.apply("BOGUS", pod("a"))


def test_relist_turns_vanished_pods_into_deletions() -> None:
    c = PodCache()
    c.replace([pod("a", rv="1"), pod("b", rv="1"), pod("c", rv="1")])
    diff = c.replace([pod("a", rv="1"), pod("c", rv="5", ready="False"), pod("d", rv="6")])
    assert (diff.added, diff.modified, diff.deleted) == (("default/d",), ("default/c",), ("default/b",))
    assert sorted(p["metadata"]["name"] for p in c.snapshot()[1]) == ["a", "c", "d"]
    v = c.version
    assert not c.replace([pod("a", rv="1"), pod("c", rv="5", ready="False"), pod("d", rv="6")]).changed
    assert c.version == v


def test_snapshot_is_shared_until_a_change() -> None:
    c = PodCache()
    c.apply("ADDED", pod("a"))
    assert c.snapshot()[1] is c.snapshot()[1]
    before = c.snapshot()[1]
    c.apply("ADDED", pod("b"))
    assert len(before) == 1 and len(c.snapshot()[1]) == 2


@pytest.mark.parametrize("p", [pod(), pod(annotations={"elastic-horovod/slots": "x", "other": "y"}),
                               pod(gpus=["2", None]), pod(deleting=True), pod(ready="False"),
                               pod(hostname="h", subdomain="s", ip="fd00::1"),
                               pod(labels={"job": "a"})])
def test_slim_pods_give_the_same_verdict(p: dict) -> None:
    for rules in (Rules(), Rules(address="dns"), Rules(group_by="job")):
        assert pods_to_hosts([slim_pod(p)], rules) == pods_to_hosts([p], rules)


def test_drain_hands_over_each_change_once() -> None:
    c = PodCache()
    c.replace([pod("a", rv="1"), pod("b", rv="1")])
    _, changes = c.drain()
    assert sorted(changes) == ["default/a", "default/b"]
    c.apply("MODIFIED", pod("a", rv="2", ready="False"))
    c.apply("MODIFIED", pod("a", rv="3"))
    c.apply("DELETED", pod("b", rv="4"))
    _, changes = c.drain()
    assert changes["default/a"]["metadata"]["resourceVersion"] == "3" and changes["default/b"] is None
    assert c.drain()[1] == {}
    c.replace([pod("a", rv="3"), pod("c", rv="5")])  # a relist: c is new, nothing else changed
    assert c.drain()[1] == {"default/c": slim_pod(pod("c", rv="5"))}
