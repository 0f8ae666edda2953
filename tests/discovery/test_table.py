"""The immutable host table: the pure full builder, and the incremental one held to it."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from discovery.cache import PodCache
from discovery.hosts import Rules
from discovery.table import ADMITTED, PREPARING, HostTable, TableBuilder, make_table
from tests.discovery.podspec import pod


def test_table_prerenders_bodies_per_group() -> None:
    pods = [pod("a", ip="10.0.0.1", labels={"job": "x"}), pod("b", ip="10.0.0.2", labels={"job": "y"}),
            pod("c", ip="10.0.0.3", labels={"job": "x"}, annotations={"elastic-horovod/slots": "2"})]
    t = make_table(7, pods, Rules(group_by="job"))
    assert t.synced and t.generation == 7 and t.pods_seen == 3 and t.served == 3
    assert t.body("x") == b"10.0.0.1:1\n10.0.0.3:2\n"
    assert t.body("y") == b"10.0.0.2:1\n"
    assert t.body("nope") == b""
    assert t.body(None) == b"10.0.0.1:1\n10.0.0.2:1\n10.0.0.3:2\n"
    assert [h.pod for h in t.hosts] == ["a", "b", "c"]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'generation'"):
        t.generation = 8  # type: ignore[misc]


def test_admission_state_is_a_value_and_filters_hosts() -> None:
    pods = [pod("a", ip="10.0.0.1"), pod("b", ip="10.0.0.2"), pod("c", ip="10.0.0.3"),
            pod("d", ip="10.0.0.4")]
    state = {"uid-default-a": ADMITTED, "uid-default-b": PREPARING, "uid-default-c": "prepare failed: exit 3"}
    t = make_table(1, pods, Rules(), state)
    assert t.text == b"10.0.0.1:1\n"
    assert [h.pod for h in t.preparing] == ["b", "d"]  # d: no state yet, so not served
    assert [(s.pod, s.reason) for s in t.skipped] == [("c", "prepare failed: exit 3")]
    assert state == {"uid-default-a": ADMITTED, "uid-default-b": PREPARING,
                     "uid-default-c": "prepare failed: exit 3"}  # read, never written


def test_builder_reports_what_to_act_on() -> None:
    b = TableBuilder(Rules())
    adm: dict[str, str] = {}
    d = b.apply({"default/a": pod("a", ip="10.0.0.1"), "default/b": pod("b", ip="10.0.0.2")}, adm)
    assert [h.pod for h in d.unprepared] == ["a", "b"] and not d.gone_uids
    adm.update({"uid-default-a": ADMITTED, "uid-default-b": PREPARING})
    d = b.apply({}, adm, {"uid-default-a"})
    assert d.hosts_changed and not d.unprepared
    assert b.table(2).text == b"10.0.0.1:1\n"
    d = b.apply({"default/a": pod("a", ip="10.0.0.1", ready="False"), "default/b": None}, adm)
    assert d.gone_uids == {"uid-default-b"}  # a's readiness flap keeps its uid
    assert b.table(3).text == b""
    d = b.apply({"default/c": pod("c", annotations={"elastic-horovod/slots": "x"})}, adm)
    assert [s.pod for s in d.new_skips] == ["c"]
    d = b.apply({"default/c": pod("c", rv="9", annotations={"elastic-horovod/slots": "x"})}, adm)
    assert d.new_skips == ()  # the same skip again is not news


def test_waiting_pods_and_the_groups_the_changed_pods_carry() -> None:
    b = TableBuilder(Rules(group_by="job"))
    d = b.apply({"default/a": pod("a", ip="10.0.0.1", labels={"job": "x"}),
                 "default/b": pod("b", ready="False", labels={"job": "y"}),
                 "default/c": pod("c", phase="Pending")})
    assert d.groups == {"x", "y"}  # a waiting pod's group is a group the daemon has seen
    t = b.table(1)
    assert [(w.pod, w.reason) for w in t.waiting_pods] == [("b", "not ready"), ("c", "not running")]
    b.apply({"default/b": pod("b", ip="10.0.0.2", labels={"job": "y"})})
    assert [w.pod for w in b.table(2).waiting_pods] == ["c"]


def test_duplicate_host_goes_to_the_next_claimant_when_the_first_leaves() -> None:
    b = TableBuilder(Rules(address="name"))
    b.apply({"ns1/w": pod("w", ns="ns1", created="2026-01-01T00:00:01Z"),
             "ns2/w": pod("w", ns="ns2", created="2026-01-01T00:00:02Z")})
    t = b.table(1)
    assert [h.namespace for h in t.hosts] == ["ns1"]
    assert [(s.namespace, s.reason) for s in t.skipped] == [("ns2", "duplicate host 'w'")]
    b.apply({"ns1/w": None})
    t = b.table(2)
    assert [h.namespace for h in t.hosts] == ["ns2"] and t.skipped == ()


# -- the incremental table equals a full rebuild, on random event sequences -----------------

NAMES = [f"p{i}" for i in range(8)]
_pod_fields = st.fixed_dictionaries({
    "ns": st.sampled_from(["default", "default", "other"]),
    "phase": st.sampled_from(["Running", "Running", "Running", "Pending"]),
    "ready": st.sampled_from(["True", "True", "False", None]),
    "ip": st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2", "fd00::1", None]),
    "deleting": st.sampled_from([False, False, False, True]),
    "annotations": st.sampled_from([None, {"elastic-horovod/slots": "2"}, {"elastic-horovod/slots": "x"}]),
    "labels": st.sampled_from([None, {"job": "a"}, {"job": "b"}]),
    "hostname": st.sampled_from([None, "h"]),
    "subdomain": st.sampled_from([None, "s"]),
    "created": st.sampled_from(["2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", "2026-01-01T00:00:03Z"]),
    "incarnation": st.integers(0, 2),
})
_event = st.one_of(
    st.tuples(st.just("ADDED"), st.sampled_from(NAMES), _pod_fields),
    st.tuples(st.just("DELETED"), st.sampled_from(NAMES), _pod_fields),
    st.tuples(st.just("ADMIT"), st.sampled_from(NAMES), st.sampled_from([ADMITTED, "prepare failed: x"])),
    st.tuples(st.just("RELIST"), st.just(""), st.lists(st.tuples(st.sampled_from(NAMES), _pod_fields),
                                                       max_size=5)),
    st.tuples(st.just("PUBLISH"), st.just(""), st.none()),
)


def _pod(name: str, f: dict[str, Any], rv: int) -> dict[str, Any]:
    kw = {k: v for k, v in f.items() if k not in ("ns", "incarnation")}
    return pod(name, ns=f["ns"], uid=f"uid-{f['ns']}-{name}-{f['incarnation']}", rv=str(rv), **kw)


def _essence(t: HostTable) -> dict[str, Any]:
    groups = {g: (v.hosts, v.body, v.preparing, v.failed) for g, v in t.groups.items()}
    return {"hosts": [(h, h.host, h.slots, h.uid, h.group) for h in t.hosts], "text": t.text,
            "skipped": t.skipped, "waiting": dict(t.waiting), "preparing": t.preparing,
            "waiting_pods": t.waiting_pods,
            "pods_seen": t.pods_seen, "served": t.served, "groups": groups}


@pytest.mark.parametrize("rules", [Rules(), Rules(group_by="job"), Rules(address="name"),
                                   Rules(address="dns", group_by="job")], ids=repr)
@pytest.mark.parametrize("with_admission", [False, True])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event, max_size=40))
def test_incremental_table_equals_full_rebuild(rules: Rules, with_admission: bool,
                                               events: list[tuple[str, str, Any]]) -> None:
    cache = PodCache()
    builder = TableBuilder(rules)
    admission: dict[str, str] | None = {} if with_admission else None
    admission_changed: set[str] = set()
    rv = 0

    def publish() -> None:
        _, changes = cache.drain()
        delta = builder.apply(changes, admission, set(admission_changed))
        admission_changed.clear()
        if admission is not None:  # what the service does with the delta
            for uid in delta.gone_uids:
                admission.pop(uid, None)
            for h in delta.unprepared:
                admission[h.uid] = PREPARING
        got = builder.table(rv)
        want = make_table(rv, cache.snapshot()[1], rules, admission)
        assert _essence(got) == _essence(want)

    for kind, name, arg in events:
        rv += 1
        if kind == "ADDED":
            cache.apply("ADDED", _pod(name, arg, rv))
        elif kind == "DELETED":
            cache.apply("DELETED", _pod(name, arg, rv))
        elif kind == "RELIST":
            cache.replace([_pod(n, f, rv) for n, f in dict(arg).items()])
        elif kind == "ADMIT" and admission is not None:
            for p in cache.snapshot()[1]:
                uid = p["metadata"]["uid"]
                if p["metadata"]["name"] == name and admission.get(uid) == PREPARING:
                    admission[uid] = arg
                    admission_changed.add(uid)
        elif kind == "PUBLISH":
            publish()
    publish()
