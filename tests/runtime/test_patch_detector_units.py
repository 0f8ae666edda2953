"""Unit tests of Horovod patch 0108 (the driver's failure detector), in Horovod's own
style: a real ``ElasticDriver`` with its ``RendezvousServer``, a ``FixedHosts`` discovery and
fake workers, threads running a real ``WorkerNotificationManager`` (the harness of
tests/runtime/test_patch_units.py). A worker is frozen by stopping its notification service's
server loop: its socket still accepts connections (the kernel does), nothing answers, as with
a SIGSTOPped process or a hung node; thawed by serving again. The end-to-end versions, through
real horovodrun, are in tests/runtime/test_patch_detector.py.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from horovod.runner.elastic import driver as driver_module
from horovod.runner.elastic.discovery import FixedHosts, HostManager

from shared.driver_events import Follower
from tests.runtime.test_patch_units import END_DEADLINE, START_DEADLINE, Job, Key, freeze_service, thaw_service
from tests.waiting import wait_for

LIVENESS = 5.0  # the default liveness timeout, seconds


def _kinds(path: Path, *kinds: str) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [r for r in map(json.loads, filter(None, lines)) if r['kind'] in kinds]


def freeze(job: Job, key: Key) -> None:
    """The worker at key stops answering (its service's loop ends, its socket still listens,
    a ping on a connection already open is not answered)."""
    freeze_service(job.managers[key]._service)


def thaw(job: Job, key: Key) -> None:
    thaw_service(job.managers[key]._service)


def _running(jobs, monkeypatch, tmp_path: Path, hosts: dict[str, int], abort: Any = None,
             **env: str) -> tuple[Job, Path, list[Key]]:
    """A job over hosts whose every worker has checked in and registered its service; abort:
    called by each worker told to abort (key, reason), as Job's."""
    events = tmp_path / 'events.jsonl'
    monkeypatch.setenv('HOROVOD_ELASTIC_EVENTS_FILE', str(events))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(driver_module, 'DISCOVER_HOSTS_FREQUENCY_SECS', 0.05)
    size = sum(hosts.values())
    job = jobs(hosts, min_np=2, max_np=size, abort=abort)
    job.start()
    keys = [(host, slot) for host, slots in hosts.items() for slot in range(slots)]
    job.wait_ready(*keys)
    wait_for(lambda: len(job.driver._workers) == size and all(
        w.client is not None for w in job.driver._workers.values()), START_DEADLINE,
        'every notification service registered')
    return job, events, keys


def _answered_since(job: Job, keys: list[Key], since: float) -> bool:
    """Whether every worker at keys has answered a ping sent after since (time.monotonic())."""
    workers = job.driver._workers
    return all(key in workers and workers[key].lost is None and workers[key].last_seen > since for key in keys)


@pytest.mark.parametrize('layout', ['16x1', '4x4'])
def test_four_frozen_workers_are_lost_and_no_one_else(jobs, monkeypatch, tmp_path, layout):
    """0108: four workers freeze together (four 1-slot pods on one node, or the four
    ranks of one pod) in a world of 16; each healthy worker takes 1.5 s to abort (closing its
    Gloo pairs one at a time, as a real rank does). Exactly those four are lost, in one
    decision or a few, no abort is sent to any of them, and the twelve others go on answering
    well past one liveness timeout after the loss. Before liveness without a cascade (eh3): one
    loss per silent worker, each sending aborts to the other frozen ones (2 x 2 s each) and to the healthy
    ones (held for their abort) on the 8 threads the pings use; the healthy workers' pings
    queued, they expired too: all 16 lost."""
    hosts = {f'host-{i:02d}': 1 for i in range(16)} if layout == '16x1' else {f'host-{i}': 4 for i in range(4)}
    job, events, keys = _running(jobs, monkeypatch, tmp_path, hosts, abort=lambda key, reason: time.sleep(1.5))
    frozen, healthy = keys[-4:], keys[:-4]
    for key in frozen:
        freeze(job, key)
    wait_for(lambda: len(_kinds(events, 'worker_lost')) >= 4, START_DEADLINE, 'the four frozen workers lost')
    lost_at = time.monotonic()
    # a cascade would lose the healthy within a liveness timeout of the loss: they must answer
    # pings sent after that window
    wait_for(lambda: _answered_since(job, healthy, lost_at + LIVENESS) or len(_kinds(events, 'worker_lost')) > 4,
             END_DEADLINE + 2 * LIVENESS, 'the healthy workers to answer past a liveness timeout after the loss')
    lost = sorted((r['detail']['host'], r['detail']['slot']) for r in _kinds(events, 'worker_lost'))
    assert lost == sorted(frozen)
    assert all(job.aborts[key] == [] for key in frozen), {key: job.aborts[key] for key in frozen}
    assert all(job.aborts[key] for key in healthy)
    assert all(r['detail']['workers'] <= len(healthy) for r in _kinds(events, 'abort')), _kinds(events, 'abort')
    quarantined = {r['detail']['host'] for r in _kinds(events, 'quarantine')}
    assert quarantined == {key[0] for key in frozen}


def test_everyone_silent_at_once_loses_nobody(jobs, monkeypatch, tmp_path):
    """0108: every worker of a world of 8 stops answering at once for longer than the
    liveness timeout (the driver's own network blipping: its pings fail everywhere), then
    answers again. More than half of the world was silent at once: the driver suspects
    itself, re-baselines and loses nobody. Before: all 8 lost, every host quarantined."""
    job, events, keys = _running(jobs, monkeypatch, tmp_path, {f'host-{i}': 1 for i in range(8)})
    for key in keys:
        freeze(job, key)
    wait_for(lambda: _kinds(events, 'liveness_rebaseline', 'worker_lost'), START_DEADLINE,
             'the liveness check to find the world silent')
    for key in keys:
        thaw(job, key)
    thawed = time.monotonic()
    wait_for(lambda: _answered_since(job, keys, thawed) or _kinds(events, 'worker_lost'), END_DEADLINE,
             'every worker to answer again')
    assert not _kinds(events, 'worker_lost', 'quarantine', 'abort')
    assert _kinds(events, 'liveness_rebaseline')
    res = job.results()
    assert sorted(res) == sorted('{}[{}]'.format(*key) for key in keys)
    assert all(code == 0 for code, _ in res.values()), res


def test_a_lost_host_gets_a_worker_again_after_its_cooldown(jobs, monkeypatch, tmp_path):
    """0108: a host whose worker went silent is quarantined for a cooldown (1 s here);
    once it is over, its old worker has ended and it is still listed, it is placed again
    (last in the assignment order: the others keep their ranks). Before: quarantined until it
    left discovery, its slots idle for the rest of the job."""
    job, events, keys = _running(jobs, monkeypatch, tmp_path, {'host-1': 1, 'host-2': 1, 'host-3': 1},
                                 HOROVOD_ELASTIC_QUARANTINE_SECONDS='1')
    freeze(job, ('host-2', 0))
    wait_for(lambda: _kinds(events, 'worker_lost'), START_DEADLINE, 'the frozen worker lost')
    wait_for(lambda: job.ended.get(('host-2', 0)), START_DEADLINE, 'its process ended')
    wait_for(lambda: _kinds(events, 'quarantine_ended'), START_DEADLINE, 'the quarantine of host-2 to end')
    assert [r['detail']['host'] for r in _kinds(events, 'quarantine')] == ['host-2']
    assert _kinds(events, 'quarantine')[0]['detail']['cooldown'] == 1.0
    order = job.driver._host_manager.current_hosts.host_assignment_order
    assert order[-1] == 'host-2', order


def test_a_host_quarantined_again_waits_longer():
    """0108: each quarantine in a row doubles the cooldown (up to QUARANTINE_MAX_SECS);
    without a cooldown (0: the earlier behaviour) a host stays quarantined until it leaves
    discovery."""
    class Driver:
        _quarantine = driver_module.ElasticDriver._quarantine
        quarantine_host = driver_module.ElasticDriver.quarantine_host  # 0111's hook: the fork's rule

        def __init__(self, secs: float) -> None:
            self._host_manager = HostManager(FixedHosts({'host-1': 1, 'host-2': 1}))
            self._host_manager.update_available_hosts()
            self._quarantine_secs = secs
            self._events = driver_module.EventLog(None)

    driver = Driver(10.0)
    cooldowns = []
    for _ in range(8):
        driver._quarantine('host-2', 'silent')
        state = driver._host_manager._hosts_state['host-2']
        cooldowns.append(round(state.quarantined_until - time.monotonic()))
        assert driver._host_manager.current_hosts.host_assignment_order == ['host-1']
        driver._host_manager.release_quarantine('host-2')
        assert driver._host_manager.current_hosts.host_assignment_order == ['host-1', 'host-2']
    assert cooldowns == [10, 20, 40, 80, 160, 320, 600, 600]
    forever = Driver(0.0)
    forever._quarantine('host-2', 'silent')
    assert forever._host_manager.quarantine_due(time.monotonic() + 1e6) == []


def test_the_events_file_is_rotated_and_followed_through_the_rotation(tmp_path):
    """0105: the events file is rotated at its bound (it becomes <file>.1, replacing the
    one before), so it takes at most twice the bound; a Follower (the stall watchdog's and the
    timeline's reader) reads every record across the rotations. Before: no bound."""
    path = tmp_path / 'events.jsonl'
    log = driver_module.EventLog(str(path), max_bytes=2000)
    follower = Follower(path)
    seen = []
    try:
        for i in range(200):
            log.emit('progress', host='host-1', slot=0, commits=i)
            if i % 7 == 0:
                seen += [r.detail['commits'] for r in follower.poll()]
    finally:
        log.close()
    seen += [r.detail['commits'] for r in follower.poll()]
    assert seen == list(range(200))
    assert path.stat().st_size <= 2000
    assert Path(f'{path}.1').stat().st_size <= 2000
    assert not Path(f'{path}.2').exists()


def test_progress_is_logged_once_per_interval_per_worker(jobs, monkeypatch, tmp_path):
    """0108: a worker's progress reports (one a second each) are logged at most every
    PROGRESS_EVENT_SECS, the first of a world at once. Before: every report, ~110 B per
    worker per second."""
    job, events, keys = _running(jobs, monkeypatch, tmp_path, {'host-1': 2})
    for commits in range(1, 51):
        for key in keys:
            job.driver.record_progress(key[0], key[1], commits)
    logged = _kinds(events, 'progress')
    assert sorted((r['detail']['host'], r['detail']['slot'], r['detail']['commits']) for r in logged) == \
        [('host-1', 0, 1), ('host-1', 1, 1)]
