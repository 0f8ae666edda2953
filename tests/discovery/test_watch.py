"""The watch component: backoff rule, and a real watch that stops on request."""
from __future__ import annotations

import threading

import pytest

from discovery.cache import PodCache
from discovery.errors import ConfigError
from discovery.kube import PodAPI, PodQuery, load_api_client
from discovery.watch import PodWatcher, backoff_delay
from tests.daemons import SELECTOR, fake_pod
from tests.waiting import wait_for


@pytest.mark.parametrize("attempt,rand,expected", [(0, 0.0, 0.1), (0, 1.0, 0.2), (3, 0.0, 0.8),
                                                   (10, 0.999999, 5.0), (10**6, 0.0, 2.5)])
def test_backoff_doubles_with_jitter_up_to_the_cap(attempt: int, rand: float, expected: float) -> None:
    assert backoff_delay(attempt, 0.2, 5.0, lambda: rand) == pytest.approx(expected, rel=1e-5)


def test_constructor_checks_arguments_and_starts_nothing() -> None:
    before = threading.active_count()
    with pytest.raises(ValueError, match="backoff_base"):
        PodWatcher(None, PodCache(), backoff_base=0)  # type: ignore[arg-type]
    w = PodWatcher(None, PodCache())  # type: ignore[arg-type]
    assert threading.active_count() == before and not w.alive


def test_missing_kubeconfig_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="does not exist"):
        load_api_client(str(tmp_path / "nope"))


def test_watch_follows_the_api_and_stop_interrupts_a_blocking_read(cluster) -> None:  # type: ignore[no-untyped-def]
    cache = PodCache()
    changed = threading.Condition()

    def on_change() -> None:
        with changed:
            changed.notify_all()

    api = PodAPI(load_api_client(str(cluster.kubeconfig)), PodQuery("default", SELECTOR))
    w = PodWatcher(api, cache, on_change=on_change, watch_timeout=300)
    w.start()
    try:
        with changed:
            assert changed.wait_for(lambda: w.status.synced, 30)
        fake_pod(cluster, "w-1", "10.9.0.1")
        with changed:
            assert changed.wait_for(lambda: len(cache) == 1 and cache.snapshot()[1][0]["status"].get("podIP"), 30)
        assert w.status.connected and w.status.lists == 1 and w.status.events >= 1
    finally:
        w.stop(timeout=10)  # the open watch would otherwise block for 300 s
    assert not w.alive


def test_a_watch_that_keeps_failing_relists_backs_off_and_recovers(cluster) -> None:  # type: ignore[no-untyped-def]
    """Every WATCH answers an ERROR event (not 410): ``WatchError`` each time. The watcher
    relists (the served list stays current), counts the failures in a row -- a LIST that
    succeeds is not the watch working, so the backoff keeps growing instead of hammering the
    API -- never gives up, and works again once the API does."""
    cache = PodCache()
    api = PodAPI(load_api_client(str(cluster.kubeconfig)), PodQuery("default", SELECTOR))
    w = PodWatcher(api, cache, watch_timeout=300, backoff_base=0.05, backoff_cap=0.5)
    cluster.fail_watches(500)
    w.start()
    try:
        wait_for(lambda: w.status.failures >= 4, 60, "four failed watches in a row")
        s = w.status
        assert s.synced and not s.fatal and w.alive
        assert s.lists >= 4  # each WatchError relists
        assert s.last_error == "watch ERROR event: 500 injected watch failure (500)"
        fake_pod(cluster, "w-1", "10.9.0.1")
        wait_for(lambda: len(cache) == 1, 60, "the pod created during the fault, seen by a relist")
        assert w.status.failures >= 4 and w.status.events == 0

        cluster.fail_watches(0)
        fake_pod(cluster, "w-2", "10.9.0.2")
        wait_for(lambda: w.status.failures == 0 and w.status.connected, 60, "the watch working again")
        wait_for(lambda: len(cache) == 2, 60, "the pod created after the fault")
        assert not w.status.fatal
    finally:
        w.stop(timeout=10)
    assert not w.alive
