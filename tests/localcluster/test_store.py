"""The store: resourceVersion on every write, bounded history, 410, what each watcher sees."""
import pytest

from localcluster.errors import AlreadyExists, Conflict, Expired, NotFound
from localcluster.selectors import parse_fields, parse_labels
from localcluster.store import Event, Scope, Store, watch_view


def pod(name, ns="default", **labels):
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {}, "status": {"phase": "Pending"}}


def test_every_write_bumps_the_global_resource_version():
    s = Store()
    a = s.create(pod("a"))
    b = s.create(pod("b"))
    assert (a["metadata"]["resourceVersion"], b["metadata"]["resourceVersion"]) == ("1", "2")
    a2 = s.replace(dict(a, status={"phase": "Running"}))
    assert a2["metadata"]["resourceVersion"] == "3"
    gone = s.remove("default", "b")
    assert gone["metadata"]["resourceVersion"] == "4" and s.resource_version == 4
    assert [e.type for e in s.events_since(0)] == ["ADDED", "ADDED", "MODIFIED", "DELETED"]
    assert [p["metadata"]["name"] for p in s.list()[0]] == ["a"]


def test_create_twice_and_missing_objects():
    s = Store()
    s.create(pod("a"))
    with pytest.raises(AlreadyExists, match='pods "a" already exists'):
        s.create(pod("a"))
    with pytest.raises(NotFound, match='pods "zz" not found'):
        s.get("default", "zz")
    s.create(pod("a", ns="other"))  # names are per namespace
    assert len(s) == 2


def test_replace_with_a_stale_resource_version_conflicts():
    s = Store()
    a = s.create(pod("a"))
    s.replace(a)
    with pytest.raises(Conflict, match='Operation cannot be fulfilled on pods "a": the object has'):
        s.replace(a, expect_rv=a["metadata"]["resourceVersion"])


def test_history_is_bounded_and_older_watches_expire():
    s = Store(history_limit=3)
    for n in range(5):
        s.create(pod(f"p{n}"))
    assert [e.resource_version for e in s.events_since(2)] == [3, 4, 5]
    with pytest.raises(Expired, match=r"too old resource version: 1 \(2\)") as info:
        s.events_since(1)
    assert info.value.code == 410
    s.compact()
    assert s.events_since(5) == []
    with pytest.raises(Expired, match=r"too old resource version: 4 \(5\)"):
        s.events_since(4)


def test_list_filters_by_namespace_and_selectors():
    s = Store()
    s.create(pod("a", role="worker"))
    s.create(pod("b", role="driver"))
    s.create(pod("c", ns="x", role="worker"))

    def names(scope: Scope) -> list[str]:
        return [p["metadata"]["name"] for p in s.list(scope)[0]]

    assert names(Scope()) == ["a", "b", "c"]
    assert names(Scope("default")) == ["a", "b"]
    assert names(Scope(None, parse_labels("role=worker"))) == ["a", "c"]
    assert names(Scope("default", fields=parse_fields("metadata.name=b"))) == ["b"]
    assert s.list()[1] == 3


def test_subscribers_see_each_event():
    s = Store()
    seen = []
    token = s.subscribe(seen.append)
    s.create(pod("a"))
    s.unsubscribe(token)
    s.create(pod("b"))
    assert [e.object["metadata"]["name"] for e in seen] == ["a"]


WORKER = Scope("default", parse_labels("role=worker"))
# (event type, labels before, labels after, what a role=worker watcher receives)
VIEW_CASES = [
    ("ADDED", None, {"role": "worker"}, "ADDED"),
    ("ADDED", None, {"role": "driver"}, None),
    ("MODIFIED", {"role": "worker"}, {"role": "worker"}, "MODIFIED"),
    ("MODIFIED", {"role": "driver"}, {"role": "worker"}, "ADDED"),
    ("MODIFIED", {"role": "worker"}, {"role": "driver"}, "DELETED"),
    ("MODIFIED", {"role": "driver"}, {}, None),
    ("DELETED", {"role": "worker"}, {"role": "worker"}, "DELETED"),
    ("DELETED", {"role": "driver"}, {"role": "driver"}, None),
]


@pytest.mark.parametrize("kind,before,after,expected", VIEW_CASES)
def test_watch_view_moves_objects_in_and_out_of_a_selector(kind, before, after, expected):
    previous = pod("a", **before) if before is not None else None
    view = watch_view(Event(kind, pod("a", **after), previous, 7), WORKER)
    assert (view[0] if view else None) == expected
