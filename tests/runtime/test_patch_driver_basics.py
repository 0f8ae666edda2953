"""Horovod patches that were tested only through what depends on them (elastic-run's push
discovery, its stall watchdog and timeline, test harnesses): push discovery, the events file,
the version, the rendezvous server's socket closed and held progress logged, each checked here
for what it promises, in one process (a real ``ElasticDriver``, its ``RendezvousServer`` and
real ``WorkerNotificationManager`` threads: the harness of tests/runtime/test_patch_units.py).
Each test fails on Horovod without its patch.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from horovod.runner.elastic import driver as driver_module
from horovod.runner.elastic.rendezvous import create_rendezvous_handler
from horovod.runner.http.http_server import RendezvousServer

from tests import drivers
from tests.runtime.test_patch_units import START_DEADLINE, Job
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
EVENT_DEADLINE = 60.0  # for an event the driver logs; generous: the machine is shared


class PushedHosts:
    """A HostDiscovery that knows when its hosts change (what elastic-run's DaemonDiscovery is
    to the driver): ``push(hosts)`` sets them and wakes ``wait_for_change``; ``close()`` wakes
    it for good. ``waits`` holds the timeouts the driver waited with."""

    def __init__(self, hosts: dict[str, int]) -> None:
        self._hosts = dict(hosts)
        self._changed = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self.waits: list[float] = []
        self.finds = 0

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        with self._lock:
            self.finds += 1
            return dict(self._hosts)

    def wait_for_change(self, timeout: float) -> bool:
        self.waits.append(timeout)
        woken = self._changed.wait(timeout)
        if not self._closed:
            self._changed.clear()
        return woken

    def push(self, hosts: dict[str, int]) -> None:
        with self._lock:
            self._hosts = dict(hosts)
        self._changed.set()

    def close(self) -> None:
        self._closed = True
        self._changed.set()


def _listen_backlog(sock: socket.socket) -> int:
    """The kernel's backlog of a listening TCP socket (Linux: ``tcp_info.tcpi_sacked`` holds
    ``sk_max_ack_backlog`` for a socket in LISTEN)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("8B6I", info)[13]


def test_the_rendezvous_server_listens_with_a_backlog_of_1024():
    """0105: the rendezvous server's listen backlog is 1,024, as the kernel has it, not the
    standard library's 5: every worker checks in, reports and answers through this server, and
    with 5 a burst of connections (16 workers checking in at once, or those made during a
    stall of the driver) overflowed it; the dropped handshakes were retried only after 1, 3,
    7 s, past a request's 2 s deadline. Plain horovodrun included, not only elastic-run's."""
    server = RendezvousServer()
    server.start()
    try:
        assert _listen_backlog(server._httpd.socket) == 1024
    finally:
        server.stop()
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", 0))
        probe.listen(5)
        assert _listen_backlog(probe) == 5  # the reading itself: the standard library's default
    finally:
        probe.close()


def test_a_discovery_that_knows_of_a_change_wakes_the_driver(monkeypatch):
    """0105: a HostDiscovery with ``wait_for_change`` is waited on, not polled: with the poll
    interval an hour, a pushed change still reaches the driver's host manager at once, and the
    driver waited on the discovery with the poll interval as its timeout. Stock: the driver
    sleeps the interval and never asks the discovery again within the test's deadline."""
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 3600.0)
    discovery = PushedHosts({'host-1': 1})
    rendezvous = RendezvousServer()
    driver = drivers.driver_class()(rendezvous, discovery, min_num_proc=1, max_num_proc=2)
    rendezvous.start(create_rendezvous_handler(driver))
    try:
        driver.wait_for_available_slots(1)
        hosts = driver._host_manager.current_hosts
        assert hosts.available_hosts == {'host-1'}
        discovery.push({'host-1': 1, 'host-2': 1})
        wait_for(lambda: 'host-2' in driver._host_manager.current_hosts.available_hosts,
                 START_DEADLINE, 'the pushed host in the driver')
        assert set(discovery.waits) == {3600.0}
    finally:
        discovery.close()
        driver.stop()


def _events(path: Path, kind: str) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [r for r in map(json.loads, filter(None, lines)) if r['kind'] == kind]


def _running_job(jobs: Any, monkeypatch: Any, tmp_path: Path) -> tuple[Job, Path]:
    events = tmp_path / 'events.jsonl'
    monkeypatch.setenv('HOROVOD_ELASTIC_EVENTS_FILE', str(events))
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    job = jobs({'host-1': 2}, min_np=2, max_np=2)
    job.start()
    job.wait_ready(('host-1', 0), ('host-1', 1))
    return job, events


def test_the_driver_logs_its_events_and_the_commits_the_workers_report(jobs, monkeypatch, tmp_path):
    """0105, 0108: with HOROVOD_ELASTIC_EVENTS_FILE the driver appends one JSON
    object a line (time, kind, detail) for what it does: the hosts it found, each worker it
    started and that checked in (0105); and a worker's commits (``report_progress``, what
    ``State.commit`` calls), sent through the rendezvous server, are logged as its progress
    (0108). Stock: no file, no ``report_progress``."""
    job, events = _running_job(jobs, monkeypatch, tmp_path)
    for record in map(json.loads, filter(None, events.read_text().splitlines())):
        assert set(record) == {'time', 'kind', 'detail'} and isinstance(record['time'], float)
    assert _events(events, 'hosts')[0]['detail']['hosts'] == ['host-1:2']
    started = {(r['detail']['host'], r['detail']['slot']) for r in _events(events, 'worker_start')}
    assert started == {('host-1', 0), ('host-1', 1)}
    manager = job.managers[('host-1', 1)]
    wait_for(lambda: manager._rendezvous is not None, START_DEADLINE, 'the worker knows its rendezvous')
    manager.report_progress()
    wait_for(lambda: any(r['detail'] == {'host': 'host-1', 'slot': 1, 'commits': 1}
                         for r in _events(events, 'progress')),
             EVENT_DEADLINE, "the worker's commit in the events file")


def test_a_progress_report_held_back_is_logged_when_its_window_ends(jobs, monkeypatch, tmp_path):
    """0108: the driver logs a worker's progress at most every PROGRESS_EVENT_SECS (bounded growth); a
    report that comes within that window is logged once the window ends, never dropped: the
    third commit, reported right after the first, reaches the events file. With bounded growth alone
    the file kept commit #1 for good."""
    monkeypatch.setattr(driver_module, 'PROGRESS_EVENT_SECS', 1.0)
    job, events = _running_job(jobs, monkeypatch, tmp_path)
    for commits in (1, 2, 3):
        job.driver.record_progress('host-1', 0, commits)
    wait_for(lambda: [r['detail']['commits'] for r in _events(events, 'progress')] == [1, 3],
             EVENT_DEADLINE, 'the held report (commit #3) logged after the first')


def test_a_stopped_rendezvous_server_no_longer_listens():
    """0105: ``RendezvousServer.stop()`` closes its listening socket: a connection to its
    port is refused at once. Stock: the socket stayed open (the kernel still accepted
    connections into its backlog) until the server was garbage-collected."""
    server = RendezvousServer()
    port = server.start()
    listening = server._httpd.socket
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=10):
            pass  # it listens while it runs
        server.stop()
        assert listening.fileno() == -1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(('127.0.0.1', port), timeout=10).close()
    finally:
        listening.close()


def test_the_installed_horovod_carries_the_series_version():
    """0101: the installed Horovod's version is the one the series sets (horovod-fork/tools/horovod-series
    --version, read from the version patch), in pip's metadata and in ``horovod.__version__``
    (read from the file, without importing Horovod): a set-up can tell a patched install from a
    stock one. Stock: 0.28.1."""
    wanted = subprocess.run([str(ROOT / 'horovod-fork' / 'tools' / 'horovod-series'), '--version'], check=True,
                            capture_output=True, text=True).stdout.strip()
    assert re.fullmatch(r'0\.28\.1\+eh\d+', wanted)
    assert importlib.metadata.version('horovod') == wanted
    spec = importlib.util.find_spec('horovod')
    assert spec is not None and spec.origin is not None
    assert f"__version__ = '{wanted}'" in Path(spec.origin).read_text()
