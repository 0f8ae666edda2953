"""Membership changes while no launcher leads (the gap between a leader's loss and the
standby's adoption), on a local cluster of two pods with two ``elastic-run --leader-election
--adopt-window`` launchers of one job training the real elastic MNIST.

The leader's process group is SIGKILLed, and at once one worker pod is deleted (its training
process gone with it) and a pod is added. The survivor's collective fails: it restores its last
commit and its reset waits for a driver (nobody answers the rendezvous). The standby leads,
adopts the survivor between two worlds and forms the next world with it and the added pod: the
survivor's process trains on (the same pid), and the job ends with 0 under the new leader."""
from __future__ import annotations

import os
import signal
import time

import pytest

from shared.driver_events import read_records as read_events
from shared.metrics_record import read_records
from tests.e2e.test_launcher_failover import launchers, longest_gap
from tests.e2e.test_launcher_loss import GONE_TIMEOUT, START_TIMEOUT, trainers
from tests.waiting import free_port, wait_for

WORKER_LABELS = {"app": "elastic-horovod", "role": "worker"}


@pytest.mark.timeout(1200)
def test_a_pod_lost_and_one_added_while_nobody_leads_are_the_new_leaders(tmp_path):
    adopt = ("--rendezvous-port", str(free_port()), "--adopt-window", "90")
    with launchers(tmp_path, *adopt, max_np=3, epochs=2) as (job, a, b, cluster):
        by_pod = {}
        for pid in a.trainers():
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            by_pod[env[b"HOROVOD_HOSTNAME"].decode()] = pid
        assert len(by_pod) == 2, by_pod
        lost_host, survivor_host = sorted(by_pod)
        survivor = by_pod[survivor_host]
        pod_of = {p.status.pod_ip: p.metadata.name for p in cluster.core_v1().list_namespaced_pod("default").items}
        lost_pod = pod_of.get(lost_host, lost_host)

        killed = time.time()
        os.killpg(a.proc.pid, signal.SIGKILL)
        cluster.delete_pod(lost_pod, grace_seconds=0)
        cluster.create_pod("worker-extra", labels=WORKER_LABELS)
        wait_for(lambda: b.says(f"elastic-run: leading job {job}"), GONE_TIMEOUT, "b to lead", interval=0.05,
                 alive=b.alive, detail=b.tail)
        wait_for(lambda: any(r.kind == "adopted" for r in read_events(b.events)), GONE_TIMEOUT + 60,
                 "b's driver to adopt the survivor", alive=b.alive, detail=b.tail)
        adopted = next(r for r in read_events(b.events) if r.kind == "adopted")
        assert adopted.detail.get("between_worlds") is True and adopted.detail["world_size"] == 1, adopted
        wait_for(lambda: any(r.kind == "reset" and r.detail.get("world_size") == 2 for r in read_events(b.events)),
                 START_TIMEOUT, "b's first world: the survivor and the added pod", alive=b.alive, detail=b.tail)
        wait_for(lambda: len(b.trainers()) == 1 and survivor in a.trainers(), START_TIMEOUT,
                 "the survivor and b's new process to run", alive=b.alive, detail=b.tail)
        resumed = time.time()
        wait_for(lambda: any(r.event == "progress" and r.time > resumed for r in read_records(a.metrics)),
                 START_TIMEOUT, "the world of the survivor and the added pod to train", interval=0.2,
                 alive=b.alive, detail=b.tail)
        assert a.trainers() == [survivor], "the survivor's process was started again"
        gap = longest_gap(a.metrics, killed - 30, time.time())
        print(f"\ngap: a pod lost and one added while nobody led; world adopted between two worlds "
              f"{adopted.time - killed:.1f} s after the kill, longest gap between steps {gap:.1f} s")
        assert b.proc.wait(timeout=START_TIMEOUT * 2) == 0, b.tail()
        assert not trainers(a.tag) and not b.trainers()

