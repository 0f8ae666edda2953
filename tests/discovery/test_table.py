"""The immutable host table and the memoizing builder."""
from __future__ import annotations

import dataclasses

import pytest

from discovery.hosts import Rules, pods_to_hosts
from discovery.table import ADMITTED, PREPARING, TableBuilder, make_table
from tests.discovery.podspec import pod


def test_table_prerenders_bodies_per_group() -> None:
    pods = [pod("a", ip="10.0.0.1", labels={"job": "x"}), pod("b", ip="10.0.0.2", labels={"job": "y"}),
            pod("c", ip="10.0.0.3", labels={"job": "x"}, annotations={"elastic-horovod/slots": "2"})]
    t = make_table(7, pods_to_hosts(pods, Rules(group_by="job")), len(pods))
    assert t.synced and t.generation == 7 and t.pods_seen == 3
    assert t.body("x") == b"10.0.0.1:1\n10.0.0.3:2\n"
    assert t.body("y") == b"10.0.0.2:1\n"
    assert t.body("nope") == b""
    assert t.body(None) == b"10.0.0.1:1\n10.0.0.2:1\n10.0.0.3:2\n"
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'hosts'"):
        t.hosts = ()  # type: ignore[misc]


def test_admission_state_filters_hosts() -> None:
    pods = [pod("a", ip="10.0.0.1"), pod("b", ip="10.0.0.2"), pod("c", ip="10.0.0.3")]
    state = {"uid-default-a": ADMITTED, "uid-default-b": PREPARING, "uid-default-c": "prepare failed: exit 3"}
    t = make_table(1, pods_to_hosts(pods), 3, lambda h: state[h.uid])
    assert t.text == b"10.0.0.1:1\n"
    assert [h.pod for h in t.preparing] == ["b"]
    assert [(s.pod, s.reason) for s in t.skipped] == [("c", "prepare failed: exit 3")]


def test_builder_reuses_verdicts_by_uid_and_resource_version() -> None:
    """A pod whose (uid, resourceVersion) was seen is not classified again (the API never
    changes an object without a new version); a new version, or a pod that left and came
    back, is."""
    b = TableBuilder(Rules())
    first = [pod(f"p{i}", ip=f"10.0.0.{i}", rv="1") for i in range(1, 4)]
    assert [h.host for h in b.result(first).hosts] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    # same uid and version, different content: the remembered verdict is served
    same_version = [pod("p1", ip="10.0.9.1", rv="1"), first[1], pod("p3", ip="10.0.0.3", rv="2", ready="False")]
    out = b.result(same_version)
    assert [h.host for h in out.hosts] == ["10.0.0.1", "10.0.0.2"]  # p3's new version: not Ready
    # p1 left (forgotten), then comes back with the same version: classified afresh
    b.result([first[1]])
    assert [h.host for h in b.result([same_version[0], first[1]]).hosts] == ["10.0.9.1", "10.0.0.2"]
