"""Unit tests of Horovod patches 0106 and 0108 (request deadlines, liveness, aborts that name
their world, liveness at its deadline, held readiness flaps), in Horovod's own style.

Like Horovod's test/single/test_elastic_driver.py (tests/horovod_upstream/single): a real
``ElasticDriver`` (the one the venv's horovodrun runs, ``tests.drivers``) with its
``RendezvousServer`` and a ``FixedHosts`` discovery, in this process; each worker is a thread
(the driver's ``create_worker_fn``) that runs a real ``WorkerNotificationManager`` (its
notification service registers with the driver through the rendezvous, as ``hvd.elastic.run``
does), records the aborts it is told to make instead of
calling ``horovod_gloo_abort``, checks in (``record_ready``) and waits. No horovodrun, no
training: the end-to-end versions are tests/runtime/test_patch_liveness.py.
"""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from horovod.runner.common.util import secret
from horovod.runner.elastic import driver as driver_module
from horovod.runner.elastic.discovery import FixedHosts, HostManager
from horovod.runner.elastic.driver import ElasticDriver
from horovod.runner.elastic.rendezvous import create_rendezvous_handler
from horovod.runner.elastic.worker import (
    NOTIFY_ATTEMPTS,
    NOTIFY_TIMEOUT_SECS,
    WorkerNotificationClient,
    WorkerNotificationManager,
    WorkerNotificationService,
)
from horovod.runner.http.http_server import RendezvousServer
from horovod.runner.util import network

from shared.event_kinds import Kind
from tests import drivers
from tests.waiting import wait_for

# Deadlines of the waits (generous: the machine is shared); none is a timing assertion.
START_DEADLINE = 60.0
END_DEADLINE = 60.0
WORKER_DEADLINE = 180.0  # a worker thread gives up waiting for the test after this
# request deadlines: a request to a frozen service fails after NOTIFY_ATTEMPTS x NOTIFY_TIMEOUT_SECS per
# socket operation; the margin is for load, stock Horovod never returns at all
REQUEST_DEADLINE = NOTIFY_ATTEMPTS * NOTIFY_TIMEOUT_SECS + 30.0
STOP_DEADLINE = 3 * driver_module.STOP_JOIN_TIMEOUT_SECS + 30.0

Key = tuple[str, int]


def freeze_service(service: WorkerNotificationService) -> None:
    """The service stops answering, as a SIGSTOPped process's does: its server loop ends (its
    listening socket still completes connections: the kernel does) and a request on a
    connection already open (the driver keeps one for its pings: kept ping connections) is read and never
    answered. ``thaw_service`` undoes it."""
    gate = getattr(service, '_test_gate', None)
    if gate is None:
        gate = service._test_gate = threading.Event()
        handle = service._handle

        def gated(req: Any, client_address: Any) -> Any:
            if not gate.wait(WORKER_DEADLINE):
                raise EOFError('frozen by the test')  # ends the connection quietly
            return handle(req, client_address)

        service._handle = gated
    gate.clear()
    service._server.shutdown()


def thaw_service(service: WorkerNotificationService) -> None:
    service._test_gate.set()
    threading.Thread(target=service._server.serve_forever, daemon=True).start()


class Job:
    """A driver, its rendezvous and its worker threads. The driver is ``driver_class``'s,
    by default the one the venv's horovodrun runs (``tests.drivers``: the project's on the
    whole series), its rendezvous server ``rendezvous``'s (Horovod's on a free port by
    default). ``aborts[key]``: the reasons the worker
    at key (host, slot) was told to abort with; ``ready[key]``: set once it has checked in
    (it is then in the world the barrier formed); ``ended[key]``: why its thread returned
    ('finish', or the driver's event: 'shutdown', 'host', 'kill'). ``close()`` ends it all."""

    def __init__(self, hosts: dict[str, int], min_np: int, max_np: int,
                 manager_factory: Callable[[], WorkerNotificationManager] = WorkerNotificationManager,
                 abort: Callable[[Key, str], None] | None = None,
                 driver_class: type[ElasticDriver] | None = None,
                 rendezvous: RendezvousServer | None = None, **driver_kwargs: Any) -> None:
        self.discovery = FixedHosts(dict(hosts))
        self.rendezvous = RendezvousServer() if rendezvous is None else rendezvous
        driver_class = drivers.driver_class() if driver_class is None else driver_class
        self.driver = driver_class(self.rendezvous, self.discovery, min_num_proc=min_np,
                                   max_num_proc=max_np, **driver_kwargs)
        intfs = network.get_local_intfs()
        self.addr = network.get_driver_ip(intfs)
        self.port = self.rendezvous.start(create_rendezvous_handler(self.driver))
        self.nic = sorted(intfs)[0]
        self.manager_factory = manager_factory
        self.abort = abort
        self.min_np = min_np
        self.finish = threading.Event()
        self.managers: dict[Key, WorkerNotificationManager] = {}  # each key's latest process's
        self._every_manager: list[WorkerNotificationManager] = []  # a respawned key's earlier ones too
        self.aborts: dict[Key, list[str]] = {}
        self.ready: dict[Key, threading.Event] = {}
        self.ended: dict[Key, str] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        self.driver.wait_for_available_slots(self.min_np)
        self.driver.start(self.min_np, self._run_worker)

    def _run_worker(self, slot_info: Any, events: list[threading.Event], joining: bool = False) -> tuple[int, float]:
        # a joiner (spawn first) runs as any worker here: it checks in at once
        key = (slot_info.hostname, slot_info.local_rank)
        with self._lock:
            self.aborts[key] = []
            ready = self.ready.setdefault(key, threading.Event())
        manager = self.manager_factory()
        with self._lock:
            self.managers[key] = manager  # before init: close() shuts its service down
            self._every_manager.append(manager)
        try:
            manager.init(rendezvous_addr=self.addr, rendezvous_port=self.port, nic=self.nic,
                         hostname=slot_info.hostname, local_rank=slot_info.local_rank)
        except (RuntimeError, OSError):  # the client's error, or a connection reset mid-request
            if not self.finish.is_set():
                raise
            # started by the driver just as the test closed the job: its rendezvous server is
            # gone, and the worker has nothing to do
            self.ended[key] = 'closed'
            return 1, time.time()

        def abort(reason: str) -> None:
            self.aborts[key].append(reason)
            if self.abort is not None:
                self.abort(key, reason)

        manager.set_abort_handler(abort)
        self.driver.record_ready(slot_info.hostname, slot_info.local_rank)
        ready.set()
        deadline = time.monotonic() + WORKER_DEADLINE
        while not self.finish.wait(0.05):
            for name, event in zip(('shutdown', 'host', 'kill'), events, strict=True):
                if event.is_set():
                    self.ended[key] = name
                    return 1, time.time()
            if time.monotonic() > deadline:
                self.ended[key] = 'deadline'
                return 1, time.time()
        self.ended[key] = 'finish'
        return 0, time.time()

    def wait_ready(self, *keys: Key) -> None:
        """Until every worker at keys has checked in (record_ready returned)."""
        def checked_in(key: Key) -> bool:
            return key in self.ready and self.ready[key].is_set()

        for key in keys:
            wait_for(functools.partial(checked_in, key), START_DEADLINE, f'worker {key} checked in')

    def client(self, key: Key) -> WorkerNotificationClient:
        return self.driver.get_worker_client(self.driver.get_slot_info(*key))

    def results(self) -> dict[str, tuple[int, float]]:
        """Let every worker return and wait (with a deadline) for the driver's results."""
        self.finish.set()
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: out.update(self.driver.get_results().worker_results),
                                  daemon=True)
        thread.start()
        wait_for(lambda: not thread.is_alive(), END_DEADLINE, 'the driver results')
        return out

    def close(self) -> None:
        self.finish.set()
        try:
            self.driver.stop()
        finally:
            events = self.driver._events._file  # HOROVOD_ELASTIC_EVENTS_FILE, if a test set it
            if events is not None:
                events.close()
            self.rendezvous.stop()
            self.rendezvous._httpd.server_close()
            with self._lock:
                managers = list(self._every_manager)
            for manager in managers:
                service = manager._service
                if service is not None:
                    service.shutdown()


def test_stale_abort_is_ignored_and_one_for_its_world_is_acted_on(jobs):
    """0106: a WorkerLostRequest names its world; the worker asks the driver which world
    it counts it in (GET worker_world) and acts only when they match. The workers checked in
    for world 1 and, the barrier passed, are in world 2: an abort computed for world 1 that
    arrives now (late) is acknowledged and ignored, one for world 2 aborts."""
    job = jobs({'host-1': 2}, min_np=2, max_np=2)
    job.start()
    keys = [('host-1', 0), ('host-1', 1)]
    job.wait_ready(*keys)
    world = job.driver.worker_world('host-1', 0)
    assert world == job.driver._worker_registry.last_rendezvous() == 2
    assert job.driver.worker_world('host-1', 1) == world

    client = job.client(keys[0])
    client.notify_worker_lost(int(time.time()), 'host-9[0] exited with 1', world - 1)
    # acknowledged at once (bounded growth), acted on by a thread of its own: the stale one first
    client.notify_worker_lost(int(time.time()), 'host-9[0] exited with 2', world)
    wait_for(lambda: job.aborts[keys[0]], END_DEADLINE, 'the abort for the current world acted on')
    assert job.aborts[keys[0]] == ['worker host-9[0] exited with 2 is gone']
    assert job.aborts[keys[1]] == []

    res = job.results()
    assert sorted(res) == ['host-1[0]', 'host-1[1]']
    assert all(code == 0 for code, _ in res.values()), res


def _world_question_failing(job: Job, monkeypatch: pytest.MonkeyPatch, failures: int | None) -> list[Key]:
    """The driver cannot say which world a worker is in for its first ``failures`` questions
    (None: never); returns the list of the questions' keys, as they come."""
    answer = job.driver.worker_world_and_checkins
    asked: list[Key] = []

    def failing(host: str, slot: int) -> Any:
        asked.append((host, slot))
        if failures is None or len(asked) <= failures:
            raise RuntimeError('the driver cannot say, for now')
        return answer(host, slot)

    monkeypatch.setattr(job.driver, 'worker_world_and_checkins', failing)
    return asked


def test_an_abort_whose_world_question_fails_asks_again_and_is_acted_on(jobs, monkeypatch):
    """0106: a worker told to abort asks which world the driver counts it in; while that
    question fails (the driver busy, a full accept backlog) it asks again, with a growing wait,
    and acts on the answer: an abort ignored would leave it blocked on a gone peer."""
    job = jobs({'host-1': 2}, min_np=2, max_np=2)
    job.start()
    keys = [('host-1', 0), ('host-1', 1)]
    job.wait_ready(*keys)
    world = job.driver.worker_world('host-1', 0)
    asked = _world_question_failing(job, monkeypatch, failures=3)

    job.client(keys[0]).notify_worker_lost(int(time.time()), 'host-9[0] exited with 1', world)
    wait_for(lambda: job.aborts[keys[0]], END_DEADLINE, 'the abort acted on once the driver could say')
    assert asked == [keys[0]] * 4
    assert job.aborts[keys[0]] == ['worker host-9[0] exited with 1 is gone']
    assert job.aborts[keys[1]] == []


def test_an_abort_whose_world_question_fails_is_dropped_once_the_worker_resets(jobs, monkeypatch):
    """0106: while the world question fails, a worker that begins a reset has left the world
    the abort was for: it stops asking and does not abort (the abort would land in the next
    world's hvd.init)."""
    job = jobs({'host-1': 2}, min_np=2, max_np=2)
    job.start()
    keys = [('host-1', 0), ('host-1', 1)]
    job.wait_ready(*keys)
    world = job.driver.worker_world('host-1', 0)
    asked = _world_question_failing(job, monkeypatch, failures=None)

    job.client(keys[0]).notify_worker_lost(int(time.time()), 'host-9[0] exited with 1', world)
    wait_for(lambda: len(asked) >= 2, END_DEADLINE, 'the world question asked again')
    job.managers[keys[0]].begin_reset()
    abort_thread = [t for t in threading.enumerate() if t.name == 'abort-collectives']
    assert len(abort_thread) == 1
    wait_for(lambda: not abort_thread[0].is_alive(), END_DEADLINE, 'the abort dropped after the reset began')
    assert job.aborts[keys[0]] == []


def test_double_abort_for_the_same_world_is_harmless(jobs):
    """0106 (aborts for a lost worker, request deadlines): the driver's abort path (_abort_collectives, as for a lost
    worker) run twice for the same world reaches each worker of that world twice; a second
    abort, even one whose handler raises (a Gloo context already aborted), is acknowledged,
    the service goes on answering, and the job still ends with every worker's success."""
    def abort(key: Key, reason: str) -> None:
        if key == ('host-1', 1) and len(job.aborts[key]) > 1:
            raise RuntimeError('already aborted')

    job = jobs({'host-1': 2}, min_np=2, max_np=2, abort=abort)
    job.start()
    keys = [('host-1', 0), ('host-1', 1)]
    job.wait_ready(*keys)

    job.driver._abort_collectives('host-9[0]: no answer for 5 s')
    for key in keys:
        wait_for(lambda key=key: len(job.aborts[key]) == 1, END_DEADLINE, f'the first abort at {key}')
    job.driver._abort_collectives('host-9[0]: no answer for 5 s')
    for key in keys:
        wait_for(lambda key=key: len(job.aborts[key]) == 2, END_DEADLINE, f'the second abort at {key}')
        job.client(key).ping(NOTIFY_TIMEOUT_SECS)  # still answers

    res = job.results()
    assert sorted(res) == ['host-1[0]', 'host-1[1]']
    assert all(code == 0 for code, _ in res.values()), res
    assert job.ended == {key: 'finish' for key in keys}


def test_request_to_a_frozen_service_fails_within_its_deadline():
    """0106: the notification client's requests have a socket deadline (2 s, two
    attempts). The service is frozen as a SIGSTOPped process is: its listening socket still
    completes connections (the kernel does), nobody reads or answers. Stock Horovod's client
    had no timeout and waited forever."""
    manager = WorkerNotificationManager()
    key = secret.make_secret_key()
    service = WorkerNotificationService(key, None, manager)
    client = None
    try:
        client = WorkerNotificationClient(service.addresses(), key, verbose=0)
        client.ping(NOTIFY_TIMEOUT_SECS)  # alive
        freeze_service(service)  # frozen: the socket listens, nothing is served

        outcome: dict[str, BaseException | None] = {}

        def notify() -> None:
            try:
                client.notify_worker_lost(int(time.time()), 'host-9[0]', 1)
                outcome['error'] = None
            except BaseException as e:  # noqa: BLE001 - the outcome is the assertion
                outcome['error'] = e

        thread = threading.Thread(target=notify, daemon=True)
        thread.start()
        wait_for(lambda: 'error' in outcome, REQUEST_DEADLINE, 'the request to the frozen service to fail')
        assert isinstance(outcome['error'], OSError), outcome  # socket.timeout is a TimeoutError
        with pytest.raises(OSError):
            client.ping(0.5)
    finally:
        service._test_gate.set()
        service._server.shutdown()
        service._server.server_close()
        service._thread.join(END_DEADLINE)
        if client is not None:
            client.close()


def test_stop_returns_while_the_coordinator_does_not_answer(jobs, monkeypatch):
    """0106: stop() does not hang when the notifier thread is delivering a host change
    (kept until acted on) to a coordinator that never answers (its service reads the request, then hangs):
    the request fails at its deadline and stop() waits at most STOP_JOIN_TIMEOUT_SECS per
    thread. Stock: the notifier, and stop() joining it, waited forever."""
    monkeypatch.setenv('HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS', '0')  # no loss of the hung worker
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    entered = threading.Event()
    release = threading.Event()

    class HungOnHostChange(WorkerNotificationManager):
        def handle_hosts_updated(self, timestamp, update_res):
            entered.set()
            release.wait(END_DEADLINE)

    job = jobs({'host-1': 1}, min_np=1, max_np=2, manager_factory=HungOnHostChange)
    try:
        job.start()
        job.wait_ready(('host-1', 0))
        job.discovery.set({'host-1': 1, 'host-2': 1})
        wait_for(entered.is_set, START_DEADLINE, 'the host change delivered to the hung coordinator')

        thread = threading.Thread(target=job.driver.stop, daemon=True)
        thread.start()
        wait_for(lambda: not thread.is_alive(), STOP_DEADLINE, 'ElasticDriver.stop() to return')
        assert not job.driver._notifier_thread.is_alive()
    finally:
        release.set()


def _watch_leave_grace(driver: ElasticDriver) -> tuple[list[list[str]], threading.Event]:
    """Record each run of the driver's leave-grace check (_abort_if_still_assigned, the real
    one) and set the event when one has ended."""
    calls: list[list[str]] = []
    ended = threading.Event()
    real = driver._abort_if_still_assigned

    def watched(hosts, reason, *args):
        calls.append(list(hosts))
        try:
            real(hosts, reason, *args)
        finally:
            ended.set()

    driver._abort_if_still_assigned = watched
    return calls, ended


def test_host_back_within_the_leave_grace_aborts_nothing(jobs, monkeypatch):
    """0106: a host that leaves discovery and is listed again within the leave grace (a
    readiness blip) aborts nothing: once the grace is over, no worker was told to abort, and
    none was lost or quarantined."""
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    grace = 10.0
    job = jobs({'host-1': 1, 'host-2': 1}, min_np=2, max_np=2, leave_grace=grace)
    job.start()
    keys = [('host-1', 0), ('host-2', 0)]
    job.wait_ready(*keys)
    calls, ended = _watch_leave_grace(job.driver)

    job.discovery.set({'host-1': 1})
    wait_for(lambda: calls, START_DEADLINE, 'the driver to see host-2 leave')
    job.discovery.set({'host-1': 1, 'host-2': 1})
    wait_for(lambda: 'host-2' in job.driver._host_manager.current_hosts.host_slots, START_DEADLINE,
             'the driver to see host-2 back')
    assert not ended.is_set(), f'host-2 came back after the {grace:g} s grace (machine too loaded)'

    wait_for(ended.is_set, grace + END_DEADLINE, 'the leave grace to end')
    assert calls == [['host-2']]
    assert job.aborts == {key: [] for key in keys}
    assert all(worker.lost is None for worker in job.driver._workers.values())
    assert not job.driver._host_manager.is_quarantined('host-2')

    res = job.results()
    assert sorted(res) == ['host-1[0]', 'host-2[0]']
    assert all(code == 0 for code, _ in res.values()), res


def test_host_gone_past_the_leave_grace_is_lost(jobs, monkeypatch):
    """The control of the test above (aborts for a lost worker, the leave grace, aborts that
    name their world): the same host not listed again
    within the grace has its worker lost (terminated through its kill event) and the worker
    left in its world is told to abort, for that world."""
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    job = jobs({'host-1': 1, 'host-2': 1}, min_np=1, max_np=2, leave_grace=1.0)
    job.start()
    job.wait_ready(('host-1', 0), ('host-2', 0))

    job.discovery.set({'host-1': 1})
    wait_for(lambda: job.aborts[('host-1', 0)], START_DEADLINE, 'the abort at host-1[0]')
    assert job.aborts[('host-1', 0)] == ['worker host-2[0]: host host-2 left discovery is gone']
    wait_for(lambda: job.ended.get(('host-2', 0)), START_DEADLINE, 'the worker on host-2 to end')
    assert job.ended[('host-2', 0)] == 'kill'
    assert job.aborts[('host-2', 0)] == []


def test_quarantined_host_gets_no_new_worker_until_it_leaves_discovery():
    """0108: HostManager.quarantine keeps a host in the discovered hosts but out of the
    assignment order (no new worker placed there) for as long as discovery lists it; once it
    has left discovery it is usable again when it comes back (a restarted or replaced node)."""
    discovery = FixedHosts({'host-1': 2, 'host-2': 2})
    manager = HostManager(discovery)
    manager.update_available_hosts()
    assert sorted(manager.current_hosts.host_assignment_order) == ['host-1', 'host-2']

    manager.quarantine('host-2')
    assert manager.is_quarantined('host-2')
    assert not manager.is_blacklisted('host-2')
    hosts = manager.current_hosts
    assert 'host-2' in hosts.host_slots
    assert hosts.host_assignment_order == ['host-1']
    assert hosts.count_available_slots() == 2

    manager.update_available_hosts()  # still listed: still quarantined
    assert manager.current_hosts.host_assignment_order == ['host-1']
    discovery.set({'host-1': 2, 'host-2': 4})  # listed with other slots: the same host
    manager.update_available_hosts()
    assert manager.current_hosts.host_assignment_order == ['host-1']
    assert manager.is_quarantined('host-2')

    discovery.set({'host-1': 2})
    manager.update_available_hosts()
    assert not manager.is_quarantined('host-2')
    discovery.set({'host-1': 2, 'host-2': 2})
    manager.update_available_hosts()
    assert manager.current_hosts.host_assignment_order == ['host-1', 'host-2']
    assert manager.current_hosts.count_available_slots() == 4


def _events(path: Any) -> list[dict[str, Any]]:
    """The driver's event log (HOROVOD_ELASTIC_EVENTS_FILE) so far."""
    import json
    try:
        with open(path) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def _kinds(path: Any, *kinds: str) -> list[dict[str, Any]]:
    return [e for e in _events(path) if e['kind'] in kinds]


def _two_registered_workers(jobs, monkeypatch, tmp_path, leave_grace: float):
    """A job on host-1 and host-2 (one slot each, discovery polled every 50 ms, the driver's
    events in tmp_path/events.jsonl) whose two workers run with their notification services
    registered (liveness pings them); (job, the events file)."""
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    events = tmp_path / 'events.jsonl'
    monkeypatch.setenv('HOROVOD_ELASTIC_EVENTS_FILE', str(events))
    job = jobs({'host-1': 1, 'host-2': 1}, min_np=1, max_np=2, leave_grace=leave_grace)
    job.start()
    job.wait_ready(('host-1', 0), ('host-2', 0))
    wait_for(lambda: all(w.client is not None for w in job.driver._workers.values()), START_DEADLINE,
             'both notification services registered')
    return job, events


@pytest.mark.parametrize('flapping', ['host-2', 'host-1'])
def test_readiness_flap_within_the_grace_reaches_no_worker(jobs, monkeypatch, tmp_path, flapping):
    """0108: a host of the world that leaves discovery while its workers answer and none
    said it is leaving (a pod NotReady for a moment) has its removal held back for the leave
    grace; listed again within it, neither the removal nor the return reaches the coordinator
    (no notification: no reset), the host keeps its place (its ranks), nothing is aborted.
    host-1 is the coordinator's host: back at the end of the discovery order it would get
    other ranks. Stock (and before held readiness flaps): the removal went to the coordinator at once."""
    grace = 10.0
    job, events = _two_registered_workers(jobs, monkeypatch, tmp_path, grace)
    keys = [('host-1', 0), ('host-2', 0)]
    ranks = {key: job.driver.get_slot_info(*key).rank for key in keys}
    calls, ended = _watch_leave_grace(job.driver)

    job.discovery.set({h: 1 for h in ('host-1', 'host-2') if h != flapping})
    wait_for(lambda: _kinds(events, 'removal_held'), START_DEADLINE, f'the removal of {flapping} held')
    job.discovery.set({'host-1': 1, 'host-2': 1})
    wait_for(lambda: _kinds(events, 'removal_dropped'), START_DEADLINE, f'{flapping} back, its removal dropped')
    assert not ended.is_set(), f'{flapping} came back after the {grace:g} s grace (machine too loaded)'
    wait_for(ended.is_set, grace + END_DEADLINE, 'the leave grace to end')

    assert calls == [[flapping]]
    assert not _kinds(events, 'notify', 'removal_released', 'worker_lost', 'abort')
    assert job.driver._pending_update is None
    assert {key: job.driver.get_slot_info(*key).rank for key in keys} == ranks
    assert job.aborts == {key: [] for key in keys}
    res = job.results()
    assert sorted(res) == ['host-1[0]', 'host-2[0]']
    assert all(code == 0 for code, _ in res.values()), res


def test_a_reset_during_a_readiness_flap_keeps_the_flapping_host_in_the_world(jobs, monkeypatch, tmp_path):
    """0108: a reset while a host's removal is held (another host's change, a lost worker
    elsewhere) forms its world with the held host and its slots: its workers still answer and
    keep their place. Before, the reset formed the world without it, released the hold, and
    the flap cost the host's workers. Back within the grace, nothing more happens."""
    job, events = _two_registered_workers(jobs, monkeypatch, tmp_path, 120.0)

    job.discovery.set({'host-1': 1})
    wait_for(lambda: _kinds(events, 'removal_held'), START_DEADLINE, 'the removal of host-2 held')
    job.driver.resume()  # a reset, as after a failure elsewhere
    assert sorted(job.driver._host_assignments) == ['host-1', 'host-2']
    assert job.driver.world_size() == 2
    assert not _kinds(events, 'removal_released')
    job.discovery.set({'host-1': 1, 'host-2': 1})
    wait_for(lambda: _kinds(events, 'removal_dropped'), START_DEADLINE, 'host-2 back, its removal dropped')
    assert not _kinds(events, 'removal_released', 'notify', 'worker_lost')
    assert job.aborts == {('host-1', 0): [], ('host-2', 0): []}


def test_a_held_host_counts_towards_max_np_and_a_spare_host_gets_no_joiner(jobs, monkeypatch, tmp_path):
    """0107: while a host's removal is held (a readiness flap), its workers are still in the
    world: its slots count towards --max-np, so a spare host gets no joiner (before, the held
    host's slots were not counted and a joiner started beyond --max-np)."""
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    events = tmp_path / 'events.jsonl'
    monkeypatch.setenv('HOROVOD_ELASTIC_EVENTS_FILE', str(events))
    hosts = {'host-1': 1, 'host-2': 1, 'host-3': 1}
    job = jobs(hosts, min_np=1, max_np=2, leave_grace=120.0, spawn_first=True)
    job.start()
    in_world = sorted(job.driver._host_assignments)  # two of the three: the discovery's order
    assert len(in_world) == 2, in_world
    (spare,) = set(hosts) - set(in_world)
    flapping = in_world[1]
    job.wait_ready(*[(host, 0) for host in in_world])
    wait_for(lambda: all(w.client is not None for w in job.driver._workers.values()), START_DEADLINE,
             'the notification services registered')

    job.discovery.set({host: 1 for host in hosts if host != flapping})
    wait_for(lambda: _kinds(events, 'removal_held'), START_DEADLINE, f'the removal of {flapping} held')
    # the discovery round that held it starts its joiners before it logs the hosts it found
    wait_for(lambda: [e for e in _events(events)[_first_index(events, 'removal_held'):] if e['kind'] == 'hosts'],
             START_DEADLINE, 'the round that held the removal to end')
    started = [e['detail'] for e in _kinds(events, 'worker_start') if e['detail'].get('host') == spare]
    assert started == [], f'a joiner started beyond --max-np on the spare host {spare}'
    assert not _kinds(events, 'removal_released')


def _first_index(path: Any, kind: str) -> int:
    return next(i for i, e in enumerate(_events(path)) if e['kind'] == kind)


def test_a_departed_worker_leaves_no_connection_kept_for_its_pings(jobs, monkeypatch, tmp_path):
    """0108: the driver keeps one connection per worker for its liveness pings; when the
    worker's process ends, that connection is closed (before, one stayed open per departed
    worker for the job's life: a week of pod churn, thousands of sockets)."""
    job, events = _two_registered_workers(jobs, monkeypatch, tmp_path, 120.0)
    key = ('host-2', 0)
    client = job.driver._workers[key].client
    wait_for(lambda: client._ping_conn is not None, START_DEADLINE, 'a liveness ping to keep its connection')
    sock = client._ping_conn[0]

    job.driver._workers[key].kill.set()  # the worker's process ends
    wait_for(lambda: job.ended.get(key) == 'kill', START_DEADLINE, 'the worker on host-2 to end')
    wait_for(lambda: _kinds(events, 'worker_exit'), START_DEADLINE, 'the driver to see its exit')
    assert client._ping_conn is None and sock.fileno() == -1, 'the connection kept for its pings is still open'


def test_held_removal_not_back_within_the_grace_is_delivered_then(jobs, monkeypatch, tmp_path):
    """0108: a held removal whose host does not come back is delivered to the
    coordinator at the end of the leave grace (no host change lost: it is kept until acted on), and the worker
    there, still in the world a grace after that, is lost as past any leave grace."""
    job, events = _two_registered_workers(jobs, monkeypatch, tmp_path, 2.0)

    job.discovery.set({'host-1': 1})
    wait_for(lambda: _kinds(events, 'removal_held'), START_DEADLINE, 'the removal held')
    wait_for(lambda: _kinds(events, 'notify'), START_DEADLINE, 'the removal delivered')
    kinds = [e['kind'] for e in _events(events) if e['kind'] in (Kind.REMOVAL_HELD, Kind.REMOVAL_RELEASED, Kind.NOTIFY)]
    assert kinds[:3] == [Kind.REMOVAL_HELD, Kind.REMOVAL_RELEASED, Kind.NOTIFY], kinds
    wait_for(lambda: job.ended.get(('host-2', 0)), START_DEADLINE, 'the worker on host-2 to end')
    assert job.ended[('host-2', 0)] == 'kill'


def test_removal_of_a_leaving_worker_goes_at_once(jobs, monkeypatch, tmp_path):
    """0108: a removal whose worker said it is leaving (SIGTERM leaves) is not held: the
    coordinator hears of it at once (here well before the 120 s grace would end)."""
    job, events = _two_registered_workers(jobs, monkeypatch, tmp_path, 120.0)

    job.driver.record_leaving('host-2', 0)
    job.discovery.set({'host-1': 1})
    wait_for(lambda: _kinds(events, 'notify'), START_DEADLINE, 'the removal delivered')
    assert not _kinds(events, 'removal_held')


def test_silent_worker_is_lost_at_its_deadline_not_at_the_next_ping_round(jobs, monkeypatch, tmp_path):
    """0108: the liveness timeout is checked when it falls due, not at the next ping
    round: with pings every 60 s and a 2 s timeout, a worker whose one ping (sent at once)
    goes unanswered is lost long before the first round. With liveness alone: silence was counted at
    the 1 s ticks, so a frozen rank was found up to a tick after the timeout (5.3 s for 5 s).
    Liveness without a cascade: silence counts only for pings actually sent: the other worker,
    never pinged in that time, is not lost (before, it was, at the same deadline)."""
    monkeypatch.setattr(driver_module, 'LIVENESS_INTERVAL_SECS', 60.0)
    monkeypatch.setenv('HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS', '2')
    events = tmp_path / 'events.jsonl'
    monkeypatch.setenv('HOROVOD_ELASTIC_EVENTS_FILE', str(events))
    job = jobs({'host-1': 1, 'host-2': 1}, min_np=1, max_np=2)
    job.start()
    job.wait_ready(('host-1', 0), ('host-2', 0))
    wait_for(lambda: all(w.client is not None for w in job.driver._workers.values()), START_DEADLINE,
             'both notification services registered')
    freeze_service(job.managers[('host-2', 0)]._service)  # frozen: its socket listens, nothing answers
    job.driver._ping_now(['host-2'])
    # the first ping round is 60 s away: a 30 s deadline tells the two apart under any load
    wait_for(lambda: _kinds(events, 'worker_lost'), 30.0, 'a worker lost at its liveness deadline')
    lost = [(e['detail']['host'], e['detail']['slot']) for e in _kinds(events, 'worker_lost')]
    assert lost == [('host-2', 0)], lost
