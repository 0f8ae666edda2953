"""What a healthy worker costs the elastic driver (Horovod patch 0108: kept ping connections), in
Horovod's own style: a real ``ElasticDriver`` with its ``RendezvousServer``, ``FixedHosts`` discovery and worker
threads running real ``WorkerNotificationManager``s (tests/runtime/test_patch_units.py's
harness). The figures (driver CPU per worker per second at 64 and 256 simulated workers) are
``scripts/benchmarks/bench_detector.py``'s; this test holds the behaviour they come from.

Before kept ping connections every liveness ping was a new TCP connection (a new thread in the
worker's service), and every worker's commit count went to the driver as an HTTP request of its own
every 3 s (a new thread, HTTP parsing, in the driver); together 0.26-0.32 ms of driver CPU per
worker per second. Now the driver keeps one connection per worker for its pings, and the
ping's answer carries the commit count: no HTTP request while the pings come.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from horovod.runner.common.util import network as wire_network
from horovod.runner.elastic import driver as driver_module
from horovod.runner.elastic import worker as worker_module
from horovod.runner.elastic.rendezvous import PUT_WORKER_PROGRESS

from shared.event_kinds import Kind
from tests.runtime.test_patch_units import START_DEADLINE, Job, Key
from tests.waiting import wait_for

PINGS = 3  # pings each worker answers while the test counts


def _progress(path: Path) -> dict[Key, int]:
    """The last commit count the events file holds for each worker."""
    out: dict[Key, int] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return out
    for r in map(json.loads, filter(None, lines)):
        if r['kind'] == Kind.PROGRESS:
            out[(r['detail']['host'], r['detail']['slot'])] = r['detail']['commits']
    return out


def test_a_healthy_committing_worker_costs_one_kept_connection_and_no_progress_request(monkeypatch, tmp_path):
    """0108: two workers commit every 0.1 s (``state.commit()`` reports progress) for as long as the
    driver takes to ping each of them 1 + PINGS times: each worker's service accepts one
    connection for all of them (before: one per ping), no progress report goes over HTTP after
    the first ping (before: one every 3 s per worker), and the commit counts still reach the
    driver's events file (the stall watchdog reads them there)."""
    events = tmp_path / 'events.jsonl'
    monkeypatch.setenv('HOROVOD_ELASTIC_EVENTS_FILE', str(events))
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    # what reaches the driver over HTTP (the rendezvous server), by scope
    puts: list[str] = []
    put = worker_module.put_data_into_kvstore

    def counting_put(addr: str, port: int, scope: str, key: str, value: Any, **kwargs: Any) -> None:
        puts.append(scope)
        put(addr, port, scope, key, value, **kwargs)

    monkeypatch.setattr(worker_module, 'put_data_into_kvstore', counting_put)
    keys: list[Key] = [('host-1', 0), ('host-2', 0)]
    job = Job({'host-1': 1, 'host-2': 1}, min_np=2, max_np=2)
    stop = threading.Event()
    try:
        job.start()
        job.wait_ready(*keys)
        wait_for(lambda: all(w.client is not None for w in job.driver._workers.values()), START_DEADLINE,
                 'both notification services registered')
        # from now on: the connections each service accepts and the pings it answers
        accepted = {key: 0 for key in keys}
        pings = {key: 0 for key in keys}
        for key in keys:
            service = job.managers[key]._service
            get_request, handle = service._server.get_request, service._handle

            def counting_accept(key: Key = key, get_request: Any = get_request) -> Any:
                accepted[key] += 1
                return get_request()

            def counting_handle(req: Any, client_address: Any, key: Key = key, handle: Any = handle) -> Any:
                if isinstance(req, wire_network.PingRequest):
                    pings[key] += 1
                return handle(req, client_address)

            service._server.get_request = counting_accept
            service._handle = counting_handle
        puts.clear()

        def commit() -> None:
            while not stop.wait(0.1):
                for key in keys:
                    job.managers[key].report_progress()

        threading.Thread(target=commit, daemon=True).start()
        # a commit before the first ping goes over HTTP (the worker cannot know yet that the
        # driver pings it); from the first ping on, the pings carry the counts
        wait_for(lambda: all(n >= 1 for n in pings.values()), START_DEADLINE, 'each worker pinged')
        puts.clear()
        wait_for(lambda: all(n >= 1 + PINGS for n in pings.values()), START_DEADLINE,
                 f'each worker pinged {PINGS} times more')
        wait_for(lambda: all(_progress(events).get(key, 0) >= 20 for key in keys), START_DEADLINE,
                 'the commit counts in the events file')
        stop.set()
        # a kept connection: the first ping after the counting began may still open it
        assert all(n <= 1 for n in accepted.values()), f'connections accepted {accepted} for pings {pings}'
        assert PUT_WORKER_PROGRESS not in puts, f'progress reports over HTTP: {puts.count(PUT_WORKER_PROGRESS)}'
    finally:
        stop.set()
        job.close()
