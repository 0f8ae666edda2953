"""Elastic MNIST on the local cluster's pods: scale 2 -> 3 -> 2, a worker SIGKILLed mid-epoch,
a worker SIGTERMed. Each pod is its own host to Horovod (its own address, sshd and pid
namespace), so Horovod's blacklisting of a failed worker's host leaves the others running.

The discovery script prints a file the test rewrites. Training runs in slow motion
(``--debug-step-delay``) while a hold file exists, so the events land mid-training; the test
removes the hold file once they have been observed, and the job finishes at full speed.
Every run must end with equal parameters on all ranks, all epochs, and each epoch's
committed samples covering the dataset exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.trainhelp import (
    HOROVODRUN,
    Job,
    check_finished_run,
    committed_samples,
    live_workers,
    samples_lines,
    train_args,
    workers,
    write_mnist,
)
from training import commits

pytestmark = pytest.mark.timeout(600)

TRAIN, TEST, EPOCHS = 480, 40, 3
PODS = ("worker-0", "worker-1", "worker-2")

@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    """A local cluster with three Ready pods: (handle, {pod: ip}).

    Horovod's Gloo aborts in a process whose hostname does not resolve; like Kubernetes, the
    local cluster writes each pod's /etc/hosts so that it does.
    """
    from localcluster.testing import running_cluster

    state = tmp_path_factory.mktemp("cluster")
    with running_cluster(state, workers=len(PODS)) as handle:
        ips = {p["name"]: p["ip"] for p in handle.status()["pods"]}
        assert sorted(ips) == list(PODS)
        for pod, ip in ips.items():
            r = handle.ssh(pod, 'getent hosts "$(hostname)"')
            assert r.stdout.split() == [ip, pod], r.stderr
        yield handle, ips


@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> Path:
    return write_mnist(tmp_path_factory.mktemp("mnist"), train=TRAIN, test=TEST)


class ElasticRun:
    """horovodrun --host-discovery-script over the pods listed in a file the test rewrites."""

    def __init__(self, tmp: Path, handle, ips: dict, mnist: Path, start: list[str]):
        self.tmp, self.handle, self.ips = tmp, handle, ips
        self.hosts = tmp / "hosts"
        self.set_hosts(start)
        discover = tmp / "discover.sh"
        discover.write_text(f"#!/bin/sh\ncat {self.hosts}\n")
        discover.chmod(0o755)
        self.hold = tmp / "hold"
        self.hold.write_text("")
        self.pause = tmp / "pause"
        self.trace = tmp / "trace"
        argv = [HOROVODRUN, "-np", str(len(start)), "--min-np", "2", "--max-np", "3",
                "--host-discovery-script", str(discover), "--network-interface", "lo",
                "--ssh-port", str(handle.ssh_port), "--ssh-identity-file", str(handle.identity),
                *train_args("mnist", mnist, tmp, EPOCHS, "--batch-size", "16",
                            "--commit-every", "2", "--log-every", "0",
                            "--debug-step-delay", "0.25", "--debug-hold-file", str(self.hold),
                            "--debug-pause-file", str(self.pause))]
        self.job = Job(argv, tmp / "horovodrun.log", cwd=str(Path(__file__).parents[2]))

    def set_hosts(self, pods: list[str]) -> None:
        tmp = self.hosts.with_suffix(".tmp")
        tmp.write_text("".join(f"{self.ips[p]}:1\n" for p in pods))
        tmp.replace(self.hosts)

    def wait_world(self, size: int, min_resets: int = 0) -> None:
        self.job.wait_for(lambda: len(live_workers(self.trace, size, min_resets)) >= size,
                          f"{size} workers training at world size {size}")

    def wait_committed(self, epoch: int, samples: int) -> None:
        self.job.wait_for(lambda: len(committed_samples(self.trace).get(epoch, ())) >= samples,
                          f"{samples} samples committed in epoch {epoch + 1}")

    def worker_on(self, rank: int) -> dict:
        latest = max(workers(self.trace), key=lambda w: (w["resets"], w["time"]))
        found = [w for w in workers(self.trace)
                 if w["rank"] == rank and w["resets"] == latest["resets"]]
        assert len(found) == 1, workers(self.trace)
        return found[0]

    def pod_of(self, worker: dict) -> str:
        return next(p for p, ip in self.ips.items() if ip == worker["host"])

    def release(self) -> int:
        self.hold.unlink()
        return self.job.finish()


def commit_sizes(trace: Path, epoch: int) -> set[int]:
    """The world sizes of the commits traced in ``epoch`` (0-based)."""
    return {rec["size"] for rec in commits.committed(samples_lines(trace)) if rec["epoch"] == epoch}


def test_scale_up_2_to_3_then_down_to_2(tmp_path, pods, mnist):
    handle, ips = pods
    run = ElasticRun(tmp_path, handle, ips, mnist, ["worker-0", "worker-1"])
    try:
        run.wait_world(2)
        run.wait_committed(0, 64)
        # the world waits (taking host changes) until the joiner is in, however long its
        # imports take on a loaded machine: otherwise the first epoch, or the whole run up to
        # its hold, can end before it joins and no step of epoch 1 is ever trained at size 3
        run.pause.write_text("")
        run.set_hosts(["worker-0", "worker-1", "worker-2"])
        run.wait_world(3, min_resets=1)
        run.pause.unlink()
        # removing a host kills its worker: wait until the world of 3 has committed a step,
        # or the scale-down can roll it back before it trained anything
        run.job.wait_for(lambda: 3 in commit_sizes(run.trace, 0), "a commit at world size 3")
        run.set_hosts(["worker-0", "worker-1"])
        run.wait_world(2, min_resets=2)
        assert run.release() == 0, run.job.output()[-4000:]
    finally:
        run.job.stop()
    records = check_finished_run(tmp_path, TRAIN, EPOCHS, final_world=2)
    sizes = commit_sizes(tmp_path / "trace", 0)
    assert sizes == {2, 3}, "the first epoch trained at world sizes 2 and 3"
    assert records[-1].world_size == 2 and records[-1].resets == 2
    lrs = {r.world_size: r.lr for r in records}
    assert lrs[2] == pytest.approx(0.02)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_worker_lost_mid_epoch(tmp_path, pods, mnist, how):
    handle, ips = pods
    run = ElasticRun(tmp_path, handle, ips, mnist, list(PODS))
    try:
        run.wait_world(3)
        run.wait_committed(1, 96)  # well into the second epoch
        victim = run.worker_on(1 if how == "SIGKILL" else 0)
        pod = run.pod_of(victim)
        r = handle.ssh(pod, f"kill -{how[3:]} {victim['pid']}")
        assert r.returncode == 0, r.stderr
        run.wait_world(2, min_resets=1)
        assert run.release() == 0, run.job.output()[-4000:]
    finally:
        run.job.stop()
    check_finished_run(tmp_path, TRAIN, EPOCHS, final_world=2)
    out = run.job.output()
    if how == "SIGTERM":
        assert "SIGTERM: rank 0 leaves the job (exit 143)" in out
        assert "exit with status code 143" in out
