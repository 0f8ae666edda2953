"""Push discovery: the daemon's long poll (``/hosts?wait=GENERATION``) and the in-process
``DaemonDiscovery`` the Horovod driver uses under elastic-run, against a real daemon on the
local cluster's API: changes arrive without polling, and the daemon's fallbacks hold. The
long poll's query-string rules are checked on ``discovery.server.wait_for_generation`` with
the query as aiohttp parses it, and once through a real daemon."""
from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web
from yarl import URL

from discovery.server import LONG_POLL_MAX, wait_for_generation
from elastic.driver.push import DaemonDiscovery, parse_hosts
from elastic.errors import BadAnswer
from tests.daemons import fake_pod
from tests.waiting import wait_for


@pytest.mark.parametrize("text,hosts", [
    ("", {}),
    ("10.0.0.1:2\n10.0.0.2:1\n", {"10.0.0.1": 2, "10.0.0.2": 1}),
    ("worker-0.svc\n", {"worker-0.svc": 3}),  # no slots: the default
])
def test_parse_hosts(text, hosts):
    assert parse_hosts(text, 3) == hosts


@pytest.mark.parametrize("bad", [";rm -rf /:1", "10.0.0.1:x", "10.0.0.1:0", "10.0.0.1:99999", "-oProxy=x:1",
                                 "10.0.0.1:\u00b2", "a b:1", "10.0.0.3\r:1", "h\x0bi:1", "h\u2028i:1"])
def test_a_bad_line_is_skipped_and_the_good_ones_kept(bad, caplog):
    assert parse_hosts(f"10.0.0.1:2\n{bad}\n10.0.0.2:1\n", 1) == {"10.0.0.1": 2, "10.0.0.2": 1}
    assert "skipping the daemon's line" in caplog.text


def test_a_partial_answer_is_refused_whole():
    with pytest.raises(BadAnswer, match="does not end with a newline"):
        parse_hosts("10.0.0.1:2\n10.0.0.2", 1)


def test_long_poll_answers_when_the_table_changes(cluster, daemon):
    fake_pod(cluster, "worker-1", "10.9.0.1")
    d = daemon(cluster)
    d.wait_host_set(["10.9.0.1:1"])
    status, headers, _ = d.get("/hosts")
    generation = int(headers["x-discovery-generation"])
    status, headers, body = d.get(f"/hosts?wait={generation - 1}")
    assert status == 200 and body == "10.9.0.1:1\n"  # already different: at once
    got = {}
    poll = threading.Thread(target=lambda: got.update(r=d.get(f"/hosts?wait={generation}&timeout=60")))
    poll.start()
    fake_pod(cluster, "worker-2", "10.9.0.2")
    poll.join(30)
    assert not poll.is_alive(), "the long poll did not answer after the change"
    status, headers, body = got["r"]
    assert int(headers["x-discovery-generation"]) > generation
    # the first publish after the change may be any pod event; the host shows by then or next
    assert status == 200 and body.startswith("10.9.0.1:1\n")
    status, headers, body = d.get(f"/hosts?wait={int(headers['x-discovery-generation'])}&timeout=0.2")
    assert status == 200  # timed out: the current table


@pytest.mark.parametrize("query, body", [
    ("wait=x", "wait wants a generation (integer), timeout seconds\n"),
    ("wait=1&timeout=z", "wait wants a generation (integer), timeout seconds\n"),
    ("wait=1&timeout=-1", f"timeout must be 0..{LONG_POLL_MAX:.0f} seconds\n"),
    ("wait=1&timeout=301", f"timeout must be 0..{LONG_POLL_MAX:.0f} seconds\n"),
    ("wait=1&timeout=nan", f"timeout must be 0..{LONG_POLL_MAX:.0f} seconds\n"),
])
def test_long_poll_bad_arguments_are_400(query, body):
    """Refused before the service is looked at (``svc`` is None here): no cluster needed."""
    with pytest.raises(web.HTTPBadRequest) as refused:
        asyncio.run(wait_for_generation(None, URL(f"/hosts?{query}").query))  # type: ignore[arg-type]
    assert refused.value.status == 400 and refused.value.text == body


def test_long_poll_bad_arguments_are_400_from_the_daemon(cluster, daemon):
    d = daemon(cluster)
    status, _, body = d.get("/hosts?wait=1&timeout=301")
    assert status == 400 and body == f"timeout must be 0..{LONG_POLL_MAX:.0f} seconds\n"
    status, _, body = d.get("/hosts?wait=x")
    assert status == 400 and body == "wait wants a generation (integer), timeout seconds\n"


def test_daemon_discovery_gets_changes_pushed_and_keeps_the_last_list_in_an_outage(cluster, daemon):
    fake_pod(cluster, "worker-1", "10.9.0.1")
    d = daemon(cluster, "--stale-after", "0.5")
    d.wait_host_set(["10.9.0.1:1"])
    found = DaemonDiscovery(d.url, poll_timeout=20)
    found.start()
    try:
        assert found.find_available_hosts_and_slots() == {"10.9.0.1": 1}
        fake_pod(cluster, "worker-2", "10.9.0.2", annotations={"elastic-horovod/slots": "2"})
        wait_for(lambda: found.wait_for_change(5), 20, "a change pushed to the driver's discovery")
        wait_for(lambda: found.find_available_hosts_and_slots() == {"10.9.0.1": 1, "10.9.0.2": 2},
                 20, "both hosts")
        polls = found.polls
        cluster.restart_api(down_seconds=4)
        d.wait_for(lambda: d.get("/readyz")[0] == 503, 10, "the outage")
        # the daemon serves the last good list, and so does the driver's discovery
        assert found.find_available_hosts_and_slots() == {"10.9.0.1": 1, "10.9.0.2": 2}
        d.wait_for(lambda: d.get("/readyz")[0] == 200, 30, "recovery")
        cluster.delete_pod("worker-1", grace_seconds=0)
        wait_for(lambda: found.find_available_hosts_and_slots() == {"10.9.0.2": 2}, 20, "the deletion")
        assert found.polls - polls < 50  # long polls, not a busy loop
    finally:
        found.stop()


def test_daemon_discovery_without_a_daemon_fails_the_first_find_with_a_reason():
    found = DaemonDiscovery("http://127.0.0.1:9", first_timeout=1.0, retry=0.1)
    found.start()
    try:
        with pytest.raises(RuntimeError, match="no host list from the discovery daemon at http://127.0.0.1:9"):
            found.find_available_hosts_and_slots()
    finally:
        found.stop()


def test_daemon_discovery_wants_an_http_url():
    with pytest.raises(ValueError, match="discovery URL must be http"):
        DaemonDiscovery("ftp://x")
