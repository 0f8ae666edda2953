"""0110: a rank waiting for a collective sleeps; it does not spin.

Real horovodrun, two ranks on this machine (Gloo): rank 1 starts its allreduce 3 s after
rank 0 (a slow peer: a longer step, a data loader behind), and rank 0 measures the CPU time
its main thread used while it waited in ``hvd.allreduce`` (``time.thread_time``). A rank
whose peers are slower must leave its core to the background thread that does the
collective, to its data loaders and to the other ranks of its node.

Fails on the build without 0110: stock ``WaitAndClear`` polled the handle in a loop of
``std::this_thread::yield()``, so the waiting rank's main thread used about as much CPU as
the wait lasted (3 CPU-seconds on an idle machine; less beside a CPU hog, never near 0).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.runtime.test_horovod_patches import HOROVODRUN, Job, run_env

WAITS_FOR_A_SLOW_PEER = """
import json, os, sys, time
import horovod.torch as hvd
import torch

hvd.init()
hvd.allreduce(torch.zeros(1), name="warm-up")  # both ranks are up and connected
waiting = sys.argv[1] + ".waiting"
if hvd.rank() == 1:
    deadline = time.monotonic() + 120
    while not os.path.exists(waiting):  # until rank 0 is in its timed allreduce
        if time.monotonic() > deadline:
            sys.exit("rank 0 never began its timed allreduce within 120 s")
        time.sleep(0.01)
    time.sleep(3.0)  # the behaviour under test: the slow peer's longer step, rank 0 waits for it
wall, cpu = time.monotonic(), time.thread_time()
if hvd.rank() == 0:
    open(waiting, "w").close()
hvd.allreduce(torch.ones(1), name="late")
wall, cpu = time.monotonic() - wall, time.thread_time() - cpu
if hvd.rank() == 0:
    with open(sys.argv[1], "w") as out:
        json.dump({"wall": wall, "cpu": cpu}, out)
hvd.shutdown()
"""


@pytest.mark.timeout(300)
def test_a_rank_waiting_for_a_slow_peer_leaves_its_core(tmp_path):
    """0110: rank 0 waits about 3 s in an allreduce for rank 1 and its main thread uses
    under a tenth of that in CPU time (on the stock build: about all of it)."""
    script, result = tmp_path / "wait_job.py", tmp_path / "rank0.json"
    script.write_text(WAITS_FOR_A_SLOW_PEER)
    job = Job(tmp_path, [HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2", "--network-interface", "lo",
                         sys.executable, str(script), str(result)], run_env())
    try:
        assert job.proc.wait(timeout=240) == 0, job.output()
    finally:
        job.close()
    waited = json.loads(Path(result).read_text())
    assert waited["wall"] >= 2.5, waited  # it did wait for the slow peer
    assert waited["cpu"] < 0.1 * waited["wall"], (
        f"rank 0's main thread used {waited['cpu']:.2f} CPU-seconds waiting {waited['wall']:.2f} s for its peer")
