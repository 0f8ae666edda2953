"""The pod API driven by the official ``kubernetes`` client, unchanged, over HTTPS with a token.

Pods here are bound to node ``remote``: stored and served, never run (fast); their status is
set through ``PATCH .../status`` as a remote kubelet would.
"""
import json
import queue
import threading
import time
import urllib.request

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from localcluster.testing import running_cluster
from tests.waiting import MIN_TIMEOUT, wait_for


@pytest.fixture(scope="module")
def lc(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("api") / "c", bookmark_interval=0.3, history=100) as handle:
        yield handle


@pytest.fixture(scope="module")
def api(lc):
    return lc.core_v1()


@pytest.fixture
def ns(request, api):
    """A namespace of its own per test (namespaces need not be created)."""
    name = request.node.name.lower().replace("_", "-")[:50].strip("-")
    yield name
    for p in api.list_namespaced_pod(name).items:
        api.delete_namespaced_pod(p.metadata.name, name, grace_period_seconds=0)


def make(api, ns, name, labels=None, node="remote", grace=None):
    body = client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
                        spec=client.V1PodSpec(node_name=node, termination_grace_period_seconds=grace,
                                              containers=[client.V1Container(name="c", image="img")]))
    return api.create_namespaced_pod(ns, body)


def names(pod_list):
    return [p.metadata.name for p in pod_list.items]


def collect(stream_factory):
    """Run a watch stream in a thread; events (or the exception) arrive on the returned queue."""
    q = queue.Queue()

    def run():
        try:
            for ev in stream_factory():
                q.put(ev)
            q.put("END")
        except Exception as exc:  # handed to the test
            q.put(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return q, t


def take(q, n, timeout=MIN_TIMEOUT):
    out = []
    for _ in range(n):
        out.append(q.get(timeout=timeout))
    return out


def test_create_sets_uid_timestamp_and_resource_version(api, ns):
    pod = make(api, ns, "a", {"role": "worker"})
    assert pod.metadata.uid and pod.metadata.creation_timestamp and int(pod.metadata.resource_version) > 0
    assert pod.status.phase == "Pending" and pod.spec.node_name == "remote"
    assert api.read_namespaced_pod("a", ns).metadata.uid == pod.metadata.uid


def test_list_with_label_and_field_selectors(api, ns):
    make(api, ns, "w0", {"role": "worker", "gen": "1"})
    make(api, ns, "w1", {"role": "worker", "gen": "2"})
    last = make(api, ns, "d0", {"role": "driver"})
    assert names(api.list_namespaced_pod(ns, label_selector="role=worker")) == ["w0", "w1"]
    assert names(api.list_namespaced_pod(ns, label_selector="role==worker,gen!=1")) == ["w1"]
    assert names(api.list_namespaced_pod(ns, label_selector="gen in (1,2)")) == ["w0", "w1"]
    assert names(api.list_namespaced_pod(ns, label_selector="gen notin (1)")) == ["d0", "w1"]
    assert names(api.list_namespaced_pod(ns, label_selector="!gen")) == ["d0"]
    assert names(api.list_namespaced_pod(ns, label_selector="gen")) == ["w0", "w1"]
    assert names(api.list_namespaced_pod(ns, field_selector="metadata.name=w1")) == ["w1"]
    pending_remote = api.list_namespaced_pod(ns, field_selector="status.phase=Pending,spec.nodeName=remote")
    assert names(pending_remote) == ["d0", "w0", "w1"]
    listed = api.list_namespaced_pod(ns)
    assert int(listed.metadata.resource_version) >= int(last.metadata.resource_version)
    everywhere = api.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert names(everywhere) == ["d0", "w0", "w1"]
    with pytest.raises(ApiException, match=r"\(400\)") as info:
        api.list_namespaced_pod(ns, label_selector="role in (worker")
    assert info.value.status == 400 and json.loads(info.value.body)["kind"] == "Status"
    with pytest.raises(ApiException, match=r"\(400\)") as info:
        api.list_namespaced_pod(ns, field_selector="metadata.labels=x")
    assert info.value.status == 400


def test_paginated_list(api, ns):
    for n in range(5):
        make(api, ns, f"p{n}")
    first = api.list_namespaced_pod(ns, limit=2)
    assert names(first) == ["p0", "p1"] and first.metadata._continue
    rest = api.list_namespaced_pod(ns, limit=10, _continue=first.metadata._continue)
    assert names(rest) == ["p2", "p3", "p4"] and not rest.metadata._continue


def test_watch_without_resource_version_starts_with_added_events(api, ns):
    make(api, ns, "a")
    make(api, ns, "b")
    events = list(watch.Watch().stream(api.list_namespaced_pod, ns, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_from_a_resource_version_replays_what_followed(api, ns):
    make(api, ns, "a", {"role": "worker"})
    rv = api.list_namespaced_pod(ns).metadata.resource_version
    make(api, ns, "b", {"role": "worker"})
    api.patch_namespaced_pod("a", ns, {"metadata": {"labels": {"role": "driver"}}})
    api.patch_namespaced_pod_status("b", ns, {"status": {"phase": "Running"}})
    events = list(watch.Watch().stream(api.list_namespaced_pod, ns, label_selector="role=worker",
                                       resource_version=rv, timeout_seconds=1))
    # a leaves the selector: a watcher of role=worker sees it DELETED
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b")]
    assert events[-1]["object"].status.phase == "Running"


def test_live_watch_sees_changes_as_they_happen(api, ns):
    rv = api.list_namespaced_pod(ns).metadata.resource_version
    q, _ = collect(lambda: watch.Watch().stream(api.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=5))
    make(api, ns, "live")
    api.delete_namespaced_pod("live", ns, grace_period_seconds=0)
    got = take(q, 2)
    assert [(e["type"], e["object"].metadata.name) for e in got] == [("ADDED", "live"), ("DELETED", "live")]


def test_too_old_resource_version_is_410_then_relist_works(api, lc, ns):
    make(api, ns, "a")
    old = api.list_namespaced_pod(ns).metadata.resource_version
    make(api, ns, "b")
    lc.compact_history()
    with pytest.raises(ApiException, match=r"\(410\)") as info:
        list(watch.Watch().stream(api.list_namespaced_pod, ns, resource_version=old, timeout_seconds=2))
    assert info.value.status == 410
    relisted = api.list_namespaced_pod(ns)
    assert names(relisted) == ["a", "b"]
    q, _ = collect(lambda: watch.Watch().stream(api.list_namespaced_pod, ns,
                                                resource_version=relisted.metadata.resource_version, timeout_seconds=5))
    make(api, ns, "c")
    assert take(q, 1)[0]["object"].metadata.name == "c"


def test_410_arrives_as_an_error_event_with_a_status_object(lc, ns):
    lc.compact_history()
    import http.client
    import ssl  # raw HTTP, to see the wire format
    ctx = ssl.create_default_context(cafile=lc.state["ca"])
    host, port = lc.api_url.split("//")[1].split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    conn.request("GET", f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion=1",
                 headers={"Authorization": f"Bearer {lc.token}"})
    resp = conn.getresponse()
    lines = resp.read().decode().splitlines()
    conn.close()
    assert resp.status == 200 and len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert (event["object"]["kind"], event["object"]["code"], event["object"]["reason"]) == ("Status", 410, "Expired")


def test_bookmarks_carry_the_current_resource_version(api, ns):
    make(api, ns, "a")
    rv = api.list_namespaced_pod(ns).metadata.resource_version
    w = watch.Watch()
    for event in w.stream(api.list_namespaced_pod, ns, resource_version=rv, allow_watch_bookmarks=True,
                          timeout_seconds=5):
        if event["type"] == "BOOKMARK":
            w.stop()
            break
    else:
        pytest.fail("no BOOKMARK event within the watch")
    bookmark_rv = event["raw_object"]["metadata"]["resourceVersion"]
    assert int(bookmark_rv) >= int(rv)


def test_watch_timeout_ends_the_stream(api, ns):
    events = list(watch.Watch().stream(api.list_namespaced_pod, ns, resource_version="0", timeout_seconds=1))
    assert events == []


def test_graceful_delete_marks_then_removes(api, lc, ns):
    # the grace period is the window in which the marked pod must still be read: 1 s was too
    # short on a loaded machine (the read came after it: 404); 5 s costs a passing run 4 s
    make(api, ns, "g", grace=5)
    marked = api.delete_namespaced_pod("g", ns)
    assert marked.metadata.deletion_timestamp is not None and marked.metadata.deletion_grace_period_seconds == 5
    assert api.read_namespaced_pod("g", ns).metadata.deletion_timestamp is not None
    lc.wait_gone("g", timeout=60, namespace=ns)
    with pytest.raises(ApiException, match=r"\(404\)") as info:
        api.read_namespaced_pod("g", ns)
    assert info.value.status == 404 and json.loads(info.value.body)["reason"] == "NotFound"


def test_replace_with_stale_resource_version_is_409(api, ns):
    pod = make(api, ns, "r")
    pod.metadata.labels = {"v": "1"}
    api.replace_namespaced_pod("r", ns, pod)
    pod.metadata.labels = {"v": "2"}
    with pytest.raises(ApiException, match=r"\(409\)") as info:
        api.replace_namespaced_pod("r", ns, pod)
    assert info.value.status == 409 and json.loads(info.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException, match=r"\(409\)") as info:
        make(api, ns, "r")
    assert info.value.status == 409 and json.loads(info.value.body)["reason"] == "AlreadyExists"


def test_patch_flavours_and_status(api, ns):
    make(api, ns, "p")
    api.patch_namespaced_pod("p", ns, [{"op": "add", "path": "/metadata/labels", "value": {"a": "1"}}])
    api.patch_namespaced_pod("p", ns, {"metadata": {"annotations": {"x": "y"}}})  # strategic merge
    cond = {"type": "Ready", "status": "True"}
    api.patch_namespaced_pod_status("p", ns,
                                    {"status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": [cond]}})
    pod = api.read_namespaced_pod_status("p", ns)
    assert pod.metadata.labels == {"a": "1"} and pod.metadata.annotations == {"x": "y"}
    assert pod.status.pod_ip == "10.0.0.9" and pod.status.conditions[0].status == "True"
    with pytest.raises(ApiException, match=r"\(422\)") as info:
        api.patch_namespaced_pod("p", ns, {"spec": {"hostname": "changed"}})
    assert info.value.status == 422


def test_bad_body_is_422(api, ns):
    with pytest.raises(ApiException, match=r"\(422\)") as info:
        api.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                       "spec": {"containers": []}})
    assert info.value.status == 422 and json.loads(info.value.body)["reason"] == "Invalid"


def test_requests_without_the_token_are_401(lc):
    import ssl
    ctx = ssl.create_default_context(cafile=lc.state["ca"])
    with pytest.raises(urllib.error.HTTPError, match="HTTP Error") as info:
        urllib.request.urlopen(lc.api_url + "/api/v1/pods", context=ctx, timeout=10)
    assert info.value.code == 401 and json.loads(info.value.read())["reason"] == "Unauthorized"


def test_pods_of_other_nodes_are_stored_not_run(lc, api, ns):
    pod = make(api, ns, "far", node="elsewhere")
    local = lc.create_pod("near-" + ns[:20], labels={"t": ns[:60]}, node_name="remote")
    for _ in range(20):  # give a kubelet every chance to (wrongly) start it
        assert api.read_namespaced_pod("far", ns).status.phase == "Pending"
    assert api.read_namespaced_pod("far", ns).status.pod_ip is None
    assert not lc.pod_data_dir("far", ns).exists()
    lc.set_ready(local["metadata"]["name"], True)
    assert api.read_namespaced_pod(local["metadata"]["name"], "default").status.conditions[-1].status == "True"
    lc.set_ready(local["metadata"]["name"], False)
    conds = {c.type: c.status for c in api.read_namespaced_pod(local["metadata"]["name"], "default").status.conditions}
    assert conds["Ready"] == "False"
    api.delete_namespaced_pod(local["metadata"]["name"], "default", grace_period_seconds=0)
    assert pod.metadata.uid


def test_restart_api_keeps_state_and_resource_versions(lc, api, ns):
    make(api, ns, "keep")
    rv = api.list_namespaced_pod(ns).metadata.resource_version
    lc.restart_api(down_seconds=1)
    with pytest.raises((urllib3.exceptions.HTTPError, OSError), match="(?i)connect|refused|retries"):  # down
        client.CoreV1Api(api.api_client).list_namespaced_pod(ns, _request_timeout=2)
    def listing():
        try:
            return api.list_namespaced_pod(ns, _request_timeout=2)
        except Exception:  # down: refused until it listens again
            return None
    listed = wait_for(listing, 15, "the API to come back", interval=0.1)
    assert names(listed) == ["keep"] and listed.metadata.resource_version == rv


def test_drop_watches_breaks_open_streams(lc, api, ns):
    q, thread = collect(lambda: watch.Watch().stream(api.list_namespaced_pod, ns, resource_version="0",
                                                     timeout_seconds=30))
    wait_for(lambda: lc.drop_watches() > 0, 10, "a watch to be open (then dropped)")
    outcome = q.get(timeout=MIN_TIMEOUT)
    assert outcome == "END" or isinstance(outcome, Exception)
    thread.join(MIN_TIMEOUT)


def test_latency_delays_every_request(lc, api, ns):
    lc.set_latency(0.4)
    try:
        start = time.monotonic()
        api.list_namespaced_pod(ns)
        assert time.monotonic() - start >= 0.4
    finally:
        lc.set_latency(0)


def test_informer_follows_the_pods_and_relists_after_410(lc, api, ns):
    from kubernetes.informer.informer import SharedInformer

    make(api, ns, "a")
    informer = SharedInformer(api.list_namespaced_pod, namespace=ns)
    errors = queue.Queue()
    informer.add_event_handler("ERROR", errors.put)
    seen = queue.Queue()
    for kind in ("ADDED", "MODIFIED", "DELETED"):
        informer.add_event_handler(kind, lambda obj, kind=kind: seen.put((kind, obj.metadata.name)))
    informer.start()
    try:
        assert seen.get(timeout=MIN_TIMEOUT) == ("ADDED", "a")
        make(api, ns, "b")
        assert seen.get(timeout=MIN_TIMEOUT) == ("ADDED", "b")
        # writes elsewhere move the resourceVersion past what this informer saw; compact and cut
        # its watch: it must get 410, relist, and keep following
        make(api, ns + "-x", "elsewhere")
        lc.compact_history()
        wait_for(lambda: lc.drop_watches() > 0, 10, "the informer's watch to be open (then dropped)")
        expired = None
        while expired is None:
            err = errors.get(timeout=MIN_TIMEOUT)
            if getattr(err, "status", None) == 410:
                expired = err
        api.delete_namespaced_pod("a", ns, grace_period_seconds=0)
        got = []
        while ("DELETED", "a") not in got:
            got.append(seen.get(timeout=MIN_TIMEOUT))
        assert sorted(p.metadata.name for p in informer.cache.list()) == ["b"]
    finally:
        # the informer's stop() waits for its watch to yield; an event wakes it
        stopper = threading.Thread(target=informer.stop, daemon=True)
        stopper.start()
        make(api, ns, "wake")
        stopper.join(MIN_TIMEOUT)
        assert not stopper.is_alive()
        api.delete_namespaced_pod("elsewhere", ns + "-x", grace_period_seconds=0)


def test_send_initial_events_ends_with_a_marked_bookmark(lc, api, ns):
    make(api, ns, "a")
    import http.client
    import ssl
    ctx = ssl.create_default_context(cafile=lc.state["ca"])
    host, port = lc.api_url.split("//")[1].split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    conn.request("GET", f"/api/v1/namespaces/{ns}/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
                 "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1", headers={"Authorization": f"Bearer {lc.token}"})
    events = [json.loads(line) for line in conn.getresponse().read().decode().splitlines()]
    conn.close()
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_the_asyncio_client_lists_and_watches(lc, api, ns):
    import asyncio

    from kubernetes.aio import client as aclient
    from kubernetes.aio import config as aconfig
    from kubernetes.aio import watch as awatch

    make(api, ns, "a", {"role": "worker"})

    async def run():
        api_client = await aconfig.new_client_from_config(config_file=str(lc.kubeconfig))
        async with api_client:
            v1 = aclient.CoreV1Api(api_client)
            listed = await v1.list_namespaced_pod(ns, label_selector="role=worker")
            events = []
            async for ev in awatch.Watch().stream(v1.list_namespaced_pod, ns, timeout_seconds=1):
                events.append((ev["type"], ev["object"].metadata.name))
            return [p.metadata.name for p in listed.items], events

    names_, events = asyncio.run(run())
    assert names_ == ["a"] and events == [("ADDED", "a")]


def test_watch_from_a_resource_version_never_issued_is_504(api, ns):
    future = int(api.list_namespaced_pod(ns).metadata.resource_version) + 1000
    with pytest.raises(ApiException, match=r"\(504\)") as info:
        list(watch.Watch().stream(api.list_namespaced_pod, ns, resource_version=str(future), timeout_seconds=1))
    assert info.value.status == 504 and "Too large resource version" in info.value.body
