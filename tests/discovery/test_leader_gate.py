"""The leader gate (discovery.leader_gate, ``--prepare-leader-lease``): a daemon beside a
standby launcher runs no preparation until its pod holds the job's Lease, prepares at once when
it takes it, and prepares nothing new once the Lease is taken from it. Against the local
cluster's Lease API through the official client, with the real daemon."""
from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timezone
from pathlib import Path

from kubernetes import client, config

from discovery.leader_gate import LeaderGate
from tests.daemons import fake_pod

PREPARE = r"""
import os, sys
logdir, sep, host = sys.argv[1:]
with open(os.path.join(logdir, "runs"), "a") as f:
    f.write(host + "\n")
"""


def test_the_gate_opens_only_for_its_identity_with_one_read_per_interval_for_all_waiters():
    holders = ["a", "a", "a", "b"]
    reads: list[str | None] = []

    def read() -> str | None:
        reads.append(holders[min(len(reads), len(holders) - 1)])
        return reads[-1]

    async def main() -> int:
        gate = LeaderGate(read, "b", "Lease ns/job", interval=0.01)
        waiters = [asyncio.create_task(gate.wait()) for _ in range(5)]
        await asyncio.sleep(0)
        assert gate.waiting == 5
        await asyncio.wait_for(asyncio.gather(*waiters), 10)
        return gate.waiting
    assert asyncio.run(main()) == 0
    assert reads[-1] == "b" and len(reads) <= 6  # five waiters share each read


def test_a_failed_read_is_not_leading_and_the_gate_waits_on():
    calls = []

    def read() -> str | None:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("connection refused")
        return "b"

    async def main() -> None:
        await asyncio.wait_for(LeaderGate(read, "b", "Lease ns/job", interval=0.01).wait(), 10)
    asyncio.run(main())
    assert len(calls) == 3


def lease(holder: str) -> client.V1Lease:
    now = datetime.now(timezone.utc)
    return client.V1Lease(metadata=client.V1ObjectMeta(name="job"), spec=client.V1LeaseSpec(
        holder_identity=holder, lease_duration_seconds=15, acquire_time=now, renew_time=now))


def test_a_standby_pods_daemon_prepares_only_while_its_pod_leads(cluster, daemon, tmp_path: Path) -> None:
    leases = client.CoordinationV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    leases.create_namespaced_lease("default", lease("launcher-a"))
    script = tmp_path / "prepare.py"
    script.write_text(PREPARE)
    runs = tmp_path / "runs"

    def run_count(host: str) -> int:
        return runs.read_text().splitlines().count(host) if runs.exists() else 0

    d = daemon(cluster, "--prepare-cmd", f"{sys.executable} {script} {tmp_path}",
               "--prepare-leader-lease", "default/job", "--prepare-leader-identity", "launcher-b")
    d.wait_hosts([])
    fake_pod(cluster, "w-1", "10.9.0.1")
    d.wait_for(lambda: d.metric("discovery_prepare_waiting_to_lead") == 1, 30, "w-1's preparation at the gate")
    assert run_count("10.9.0.1") == 0 and d.hosts() == []
    assert "w-1" in [p["pod"] for p in d.json()["preparing"]]
    # the standby takes over: its daemon prepares at once
    taken = leases.read_namespaced_lease("job", "default")
    taken.spec.holder_identity = "launcher-b"
    leases.replace_namespaced_lease("job", "default", taken)
    d.wait_hosts(["10.9.0.1:1"])
    assert run_count("10.9.0.1") == 1
    assert d.metric("discovery_prepare_waiting_to_lead") == 0
    # fenced: the Lease went to another launcher; a new pod is not prepared by this daemon
    taken = leases.read_namespaced_lease("job", "default")
    taken.spec.holder_identity = "launcher-c"
    leases.replace_namespaced_lease("job", "default", taken)
    fake_pod(cluster, "w-2", "10.9.0.2")
    d.wait_for(lambda: d.metric("discovery_prepare_waiting_to_lead") == 1, 30, "w-2's preparation at the gate")
    assert run_count("10.9.0.2") == 0
    assert d.hosts() == ["10.9.0.1:1"]
    assert any("preparation waits until this pod leads" in line for line in d.lines), d.lines[-10:]
