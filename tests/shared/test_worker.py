"""shared.worker: the one background-thread lifecycle (start once, stop with a deadline, the
thread's exception raised by stop()), and the five launcher/sync threads built on it."""
from __future__ import annotations

import io
import threading

import pytest

from elastic.driver import push
from elastic.launch import monitor, stall, watch
from elastic.sync import progress
from shared.hosts_document import HostsDocument
from shared.worker import Worker
from tests.waiting import wait_for


def test_start_once_stop_waits_and_is_safe_twice():
    runs: list[int] = []
    worker = Worker(lambda: (runs.append(1), worker.stopping.wait(60)), "t-once")
    assert worker.stop() is True  # before start: nothing to stop
    worker = Worker(lambda: (runs.append(1), worker.stopping.wait(60)), "t-once")
    worker.start()
    worker.start()
    wait_for(lambda: runs, 10, "the target to run")
    assert worker.alive
    assert worker.stop(timeout=30) is True
    assert not worker.alive and runs == [1]  # started once
    assert worker.stop() is True
    worker.start()  # never restarts
    assert not worker.alive and runs == [1]


def test_stop_calls_wake_and_honours_its_deadline():
    release = threading.Event()
    woken: list[bool] = []
    worker = Worker(lambda: release.wait(60), "t-deadline", wake=lambda: woken.append(True))
    worker.start()
    assert worker.stop(timeout=0.05) is False  # the target ignores stopping: the deadline ends the wait
    assert woken == [True] and worker.alive
    release.set()
    assert worker.stop(timeout=30) is True


def test_stop_from_the_worker_thread_does_not_wait():
    seen: list[bool] = []
    worker = Worker(lambda: seen.append(worker.stop(timeout=None)), "t-self")
    worker.start()
    wait_for(lambda: seen, 10, "the target to stop itself")
    assert seen == [False]  # it was still running when it asked
    assert worker.stop(timeout=30) is True


def test_the_targets_exception_is_raised_by_stop_once():
    worker = Worker(lambda: (_ for _ in ()).throw(ValueError("broken target")), "t-error")
    worker.start()
    wait_for(lambda: not worker.alive, 10, "the target to fail")
    assert isinstance(worker.error, ValueError)
    with pytest.raises(ValueError, match="broken target"):
        worker.stop()
    assert worker.stop() is True


def _threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == prefix]


@pytest.mark.parametrize("make, name", [
    (lambda tmp: push.DaemonDiscovery("http://127.0.0.1:9", retry=0.05, poll_timeout=0.2), "push-discovery"),
    (lambda tmp: monitor.Monitor(str(tmp / "events.jsonl"), [stall.StallPolicy(60, started=0.0)],
                                 lambda decision: None, interval=0.05), "launcher-monitor"),
    (lambda tmp: watch.DaemonWatch("http://x", 0.05, fetch=lambda url: HostsDocument(synced=True)), "daemon-watch"),
    (lambda tmp: progress.ProgressReporter(progress.ProgressBoard(["h1"], 1, 1), io.StringIO(), 0.05, tty=False),
     "dataset-sync-progress"),
], ids=["push", "monitor", "daemon-watch", "progress"])
def test_the_background_threads_share_the_lifecycle(tmp_path, make, name):
    """Each starts one named thread however often start() is called, and its stop() ends it."""
    before = len(_threads(name))
    thing = make(tmp_path)
    thing.start()
    thing.start()
    wait_for(lambda: len(_threads(name)) == before + 1, 10, f"one {name} thread")
    thing.stop()
    wait_for(lambda: len(_threads(name)) == before, 30, f"the {name} thread to end")
    thing.stop()  # safe twice
