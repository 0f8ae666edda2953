"""A joiner's input pipeline and kernels are ready before it waits in ``hvd.init()``
(``training.warmup``): the driver takes a joiner in once it waits there (spawn first), so
whatever it still does after that, the running world waits for.

ResNet-50 on a tiny-imagenet tree (an ImageFolder read by PIL in loading processes) on the
GPU code path (``--debug-gpu-path``: persistent forkserver loaders, mixed precision,
channels_last; only the device differs), horovodrun growing from 1 to 2 slots by a
discovery script: the joiner's trace events show its loading processes started and each
one's batch loaded, its first batch on the device and the autotune pass done, all before it
calls ``hvd.init()``; and the run keeps the elastic contract (same parameters everywhere,
every sample once per epoch). Order comes from the ``--trace-dir`` events, never timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.test_join_setup import events
from tests.training.trainhelp import (
    HOROVODRUN,
    Job,
    check_finished_run,
    committed_samples,
    live_workers,
    run_env,
    train_args,
    write_tiny_imagenet,
)

pytestmark = [pytest.mark.timeout(1800), pytest.mark.horovod]
ROOT = str(Path(__file__).parents[2])
EPOCHS = 2
STARTUP = ["start", "prepared", "loaders-ready", "first-batch", "autotuned", "init", "initialized",
           "first-step"]


def test_a_joiners_loaders_first_batch_and_autotune_are_ready_before_hvd_init(tmp_path):
    root = write_tiny_imagenet(tmp_path / "tiny", classes=3, per_class=8, val_per_class=2)
    n = 24
    trace = tmp_path / "trace"
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    hold = tmp_path / "hold"
    hold.write_text("")
    argv = [HOROVODRUN, "-np", "1", "--min-np", "1", "--max-np", "2",
            "--host-discovery-script", str(discover), "--network-interface", "lo",
            "--elastic-timeout", "300",
            *train_args("resnet50", root, tmp_path, EPOCHS, "--image-size", "64", "--batch-size", "4",
                        "--val-batch-size", "4", "--commit-every", "1", "--host-check-every", "1",
                        "--log-every", "0", "--debug-gpu-path", "--amp-dtype", "bf16",
                        "--workers", "1", "--debug-step-delay", "0.2",
                        "--debug-hold-file", str(hold))]
    job = Job(argv, tmp_path / "horovodrun.log", cwd=ROOT, env=run_env())
    try:
        job.wait_for(lambda: len(committed_samples(trace).get(0, ())) >= 8,
                     "8 samples of epoch 1 committed at world size 1", 600)
        tmp = hosts.with_suffix(".tmp")
        tmp.write_text("localhost:2\n")
        tmp.replace(hosts)
        job.wait_for(lambda: len(live_workers(trace, 2, min_resets=1)) >= 2,
                     "2 workers after the scale-up", 600)
        hold.unlink()
        assert job.finish(600) == 0, job.output()[-4000:]
    finally:
        job.stop()
    check_finished_run(tmp_path, n, EPOCHS, final_world=2)

    by_stem = events(trace)
    assert len(by_stem) == 2, by_stem
    joiner = next(recs for recs in by_stem.values()
                  if any(r["event"] == "initialized" and r["size"] == 2 for r in recs))
    order = [r["event"] for r in joiner if r["event"] in STARTUP]
    # everything the first step needs is done before the joiner says it is ready (hvd.init)
    assert order == STARTUP, joiner
    ready = next(r for r in joiner if r["event"] == "loaders-ready")
    assert ready["workers"] == 1 and ready["batches"] == 1, ready
    first = next(r for r in joiner if r["event"] == "first-batch")
    assert first["shape"] == [4, 3, 64, 64], first  # the full batch: the shape training autotunes for
    for recs in by_stem.values():  # the first world's worker warms up the same way
        assert [r["event"] for r in recs if r["event"] in STARTUP] == STARTUP, recs
