"""Joins that do not stop training, the training scripts' part: a worker does what needs no
rank before ``hvd.init()``, and only rank 0 reads the checkpoint.

- a worker joining a running job (horovodrun, 1 -> 2 slots by a discovery script) has built
  its model and optimizer -- ``torch._dynamo``, which torch.optim imports lazily, included --
  before it calls ``hvd.init()``; it does not read the checkpoint that exists when it joins,
  and the run keeps the elastic contract (same parameters everywhere, every sample once);
- a resumed job where rank 1 sees an unreadable checkpoint (its own directory,
  ``tests.training.rank_dir_job``) starts from rank 0's: only rank 0 opens a checkpoint, and
  every rank trains on from its weights, step counters and sampler position.

Order of events is read from the workers' ``--trace-dir`` events (``training/trace.py``),
never timings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.training.trainhelp import (
    HOROVODRUN,
    Job,
    check_finished_run,
    committed_samples,
    finals,
    live_workers,
    metrics_lines,
    run_env,
)
from training import checkpoint

pytestmark = [pytest.mark.timeout(900), pytest.mark.horovod]
ROOT = str(Path(__file__).parents[2])
EPOCHS = 10  # 53 s of slow steps after the scale-up at the most
STARTUP = ["start", "prepared", "init", "initialized", "first-step"]


def events(trace: Path) -> dict[str, list[dict]]:
    """Every worker process's start-up events in the order written, by trace file stem."""
    return {p.name[:-len(".events")]: [json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted(trace.glob("*.events"))}


def startup_order(recs: list[dict]) -> list[str]:
    return [r["event"] for r in recs if r["event"] in STARTUP]


def test_a_joiner_is_ready_before_hvd_init_and_does_not_read_the_checkpoint(tmp_path):
    # The driver starts a joiner while the world trains and takes it in once it waits in
    # hvd.init (spawn first): the run must last long enough at world size 1 for the joiner's
    # start-up (10-50 s on a loaded machine), so the steps are slow until it is in (the hold).
    n = 192
    trace, ckpt = tmp_path / "trace", tmp_path / "ckpt"
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    hold = tmp_path / "hold"
    hold.write_text("")
    argv = [HOROVODRUN, "-np", "1", "--min-np", "1", "--max-np", "2",
            "--host-discovery-script", str(discover), "--network-interface", "lo",
            "--elastic-timeout", "300", sys.executable, "-m", "training.mnist", "--synthetic",
            "--synthetic-size", str(n), "--epochs", str(EPOCHS), "--batch-size", "16",
            "--commit-every", "2", "--host-check-every", "1", "--log-every", "0",
            "--weight-decay", "0.01", "--momentum", "0.9", "--workers", "0",
            "--checkpoint-dir", str(ckpt), "--trace-dir", str(trace),
            "--metrics-file", str(tmp_path / "metrics.jsonl"),
            "--debug-step-delay", "0.5", "--debug-hold-file", str(hold)]
    # Gloo's default rendezvous timeout: the world waits there only for a joiner already
    # waiting in hvd.init (spawn first), never for its start-up
    job = Job(argv, tmp_path / "horovodrun.log", cwd=ROOT, env=run_env())
    try:
        # epoch 1 is done and checkpointed before the second worker is started
        job.wait_for(lambda: len(committed_samples(trace).get(1, ())) >= 32,
                     "32 samples of epoch 2 committed at world size 1", 600)
        assert checkpoint.latest(ckpt) is not None
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
                  if any(r["event"] == "initialized" and r["size"] == 2 for r in recs[:4]))
    # model and optimizer (and the lazy torch._dynamo import) before hvd.init(), nothing of
    # that between hvd.init() and the first step
    assert startup_order(joiner) == STARTUP, joiner
    init = next(r for r in joiner if r["event"] == "init")
    assert init["dynamo"] is True, init
    # the checkpoint existed when it joined; the state sync, not the file, gave it the state
    assert not [r for r in joiner if r["event"] == "checkpoint-read"], joiner
    for recs in by_stem.values():
        assert startup_order(recs) == STARTUP, recs
        assert all(r["rank"] == 0 for r in recs if r["event"] == "checkpoint-read"), recs


def saved_mid_epoch(directory: Path, n: int, processed: int, batch: int) -> Path:
    """A checkpoint of ``training.mnist`` (weight decay 0.01, momentum 0.9) in the middle of
    epoch 1, ``processed`` samples done, with momentum in the optimizer state."""
    import torch

    from training.loop import param_groups
    from training.models import MnistNet

    torch.manual_seed(7)
    model = MnistNet()
    opt = torch.optim.SGD(param_groups(model, 0.01, 0.01), lr=0.01, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    payload = {"task": "mnist", "dataset_size": n, "model": model.state_dict(),
               "optimizer": opt.state_dict(), "batch": batch, "resets": 0,
               "stats": (10.0, 3, processed), "clock": (1.0, 2.0), "scaler_state": None}
    return checkpoint.save(directory, payload, 0, processed)


def test_only_rank_0_reads_the_checkpoint_and_every_rank_resumes_from_it(tmp_path):
    from training.accounting import epoch_order

    n, processed, batch = 64, 32, 4
    base = tmp_path / "ckpt"
    good = saved_mid_epoch(base / "rank0", n, processed, batch)
    # what rank 1 would see if it looked: a newer checkpoint it cannot read
    (base / "rank1").mkdir(parents=True)
    (base / "rank1" / checkpoint.name_for(0, 48)).write_bytes(b"not a checkpoint")
    trace = tmp_path / "trace"
    argv = [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--network-interface", "lo",
            sys.executable, "-m", "tests.training.rank_dir_job", str(base),
            "--synthetic", "--synthetic-size", str(n), "--epochs", "1",
            "--batch-size", "8", "--commit-every", "1", "--log-every", "0",
            "--weight-decay", "0.01", "--momentum", "0.9", "--workers", "0",
            "--trace-dir", str(trace), "--metrics-file", str(tmp_path / "metrics.jsonl")]
    job = Job(argv, tmp_path / "job.log", cwd=ROOT)
    try:
        assert job.finish(600) == 0, job.output()[-4000:]
    finally:
        job.stop()
    assert f"resuming from {good}" in job.output()
    reads = [r for recs in events(trace).values() for r in recs if r["event"] == "checkpoint-read"]
    assert [(r["rank"], r["path"]) for r in reads] == [(0, str(good))], reads
    # both ranks trained the rest of epoch 1 from the checkpoint's position, each sample once
    seen = committed_samples(trace)
    assert sorted(seen) == [0]
    assert sorted(seen[0]) == sorted(epoch_order(n, 42, 0)[processed:])
    done = finals(trace)
    assert sorted(f["rank"] for f in done) == [0, 1] and {f["epochs"] for f in done} == {1}
    assert done[0]["params_sha256"] == done[1]["params_sha256"], done
    # the counters came from the checkpoint: 2 more steps of 16, the epoch's 64 samples
    (epoch,) = [r for r in metrics_lines(tmp_path / "metrics.jsonl") if r.event == "epoch"]
    assert (epoch.epoch, epoch.batch, epoch.samples) == (1, batch + 2, n), epoch
