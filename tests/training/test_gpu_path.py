"""The GPU code path on the CPU (``--debug-gpu-path``: channels_last, mixed precision, the
gradient scaler, forkserver loaders; only the device differs), under real horovodrun.

- a channels_last ResNet-50 in bf16 (``--augment-on-device``) through an elastic 2 -> 3
  scale-up: the state sync and the gradient allreduce accept its tensors, and every rank
  ends with the same parameters;
- a 2 -> 3 scale-up with weight decay in fp16: the joiner does not drift from the others;
- ``--augment-on-device`` in that scale-up, on a tiny-imagenet tree: each rank (the joiner
  too) with its own augmentation stream;
- different augmentation streams on each rank in loading processes (``--workers 1``); in
  the training process (``--workers 0``, the CPU default) test_commands.py's ResNet-50 run
  checks it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.trainhelp import (
    HOROVODRUN,
    Job,
    LocalScaleUp,
    check_finished_run,
    inputs_lines,
    train_args,
    write_identical_images,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.horovod]
ROOT = str(Path(__file__).parents[2])


def test_augment_on_device_elastic_scale_up_on_tiny_imagenet(tmp_path):
    """A channels_last ResNet-50 in bf16 with weight decay through an elastic 2 -> 3 scale-up:
    the state sync and the gradient allreduce accept its tensors (stock Horovod refused a
    channels_last model's weights and momentum buffers: "Tensor is required to be
    contiguous") and every rank ends with the same parameters. With --augment-on-device: the
    loading processes read JPEG bytes, the training process decodes and augments them (here
    on the CPU); the elastic contract holds unchanged, and each rank draws its own
    augmentation: every training image is the same picture, so the first batches of the two
    first ranks and of the joiner differ only if their augmentation streams do."""
    root = write_identical_images(tmp_path / "tiny", classes=3, per_class=8, val_per_class=2)
    n = 24
    argv = [*train_args("resnet50", root, tmp_path, 2), "--image-size", "64",
            "--augment-on-device", "--batch-size", "2", "--val-batch-size", "4",
            "--commit-every", "2", "--host-check-every", "1", "--log-every", "0",
            "--weight-decay", "0.01", "--debug-gpu-path", "--amp-dtype", "bf16", "--workers", "1",
            "--debug-step-delay", "0.2"]
    run = LocalScaleUp(tmp_path, argv)
    try:
        assert run.scale_up_after(8) == 0, run.job.output()[-4000:]
    finally:
        run.job.stop()
    assert "Tensor is required to be contiguous" not in run.job.output()
    records = check_finished_run(tmp_path, n, 2, final_world=3)
    assert all(r.val_accuracy is not None for r in records if r.event == "epoch")
    # each worker's first training batch: ranks 0 and 1 in the first world, the joiner's
    firsts = [lines[0] for lines in inputs_lines(tmp_path / "trace")]
    assert len(firsts) == 3 and {0, 1} <= {rec["rank"] for rec in firsts}, firsts
    assert len({rec["sha256"] for rec in firsts}) == 3, firsts


def test_joiner_with_weight_decay_ends_with_the_same_parameters(tmp_path):
    """Horovod's broadcast_optimizer_state steps a joiner's fresh optimizer with zero
    gradients; with weight decay that moved the joiner's weights after they were synced.
    Here on the GPU path in fp16 (the gradient scaler's state synced too); on the CPU path
    test_ramp.py's real elastic scale-up trains with weight decay and checks the same."""
    n = 480
    extra = ["--debug-gpu-path", "--amp-dtype", "fp16", "--workers", "1"]
    argv = [*train_args("mnist", Path("unused"), tmp_path, 2)[:3], "--synthetic",
            "--synthetic-size", str(n), "--epochs", "2", "--batch-size", "16",
            "--commit-every", "4", "--host-check-every", "2", "--log-every", "0",
            "--weight-decay", "0.01", "--momentum", "0.9",
            "--trace-dir", str(tmp_path / "trace"), "--metrics-file", str(tmp_path / "metrics.jsonl"),
            "--debug-step-delay", "0.2", *extra]
    run = LocalScaleUp(tmp_path, argv)
    try:
        assert run.scale_up_after(96) == 0, run.job.output()[-4000:]
    finally:
        run.job.stop()
    check_finished_run(tmp_path, n, 2, final_world=3)


def test_each_rank_draws_its_own_augmentation_in_its_loading_processes(tmp_path):
    """Every training image is the same picture: the two ranks' first batches differ only if
    their loading processes draw different augmentation streams."""
    root = write_identical_images(tmp_path / "tiny")
    argv = [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--network-interface", "lo",
            *train_args("resnet50", root, tmp_path, 1, "--image-size", "64", "--batch-size", "2",
                        "--val-batch-size", "2", "--commit-every", "8", "--log-every", "0",
                        "--workers", "1", "--num-classes", "2")]
    job = Job(argv, tmp_path / "horovodrun.log", cwd=ROOT)
    try:
        assert job.finish(600) == 0, job.output()[-4000:]
    finally:
        job.stop()
    firsts = [lines[0] for lines in inputs_lines(tmp_path / "trace")]
    assert sorted(r["rank"] for r in firsts) == [0, 1], firsts
    # every image is the same picture, so equal inputs would mean equal crops and flips
    assert firsts[0]["sha256"] != firsts[1]["sha256"], firsts
