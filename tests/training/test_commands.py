"""The commands end to end on this machine: one-line errors for bad datasets, resuming from
the last checkpoint after a SIGTERM, and ResNet-50 on a tiny tiny-imagenet tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shared.metrics_record import MetricsRecord
from tests.training.trainhelp import (
    HOROVODRUN,
    Job,
    check_finished_run,
    committed_samples,
    finals,
    inputs_lines,
    run_env,
    train_args,
    write_identical_images,
    write_mnist,
    write_tiny_imagenet,
)
from training import checkpoint, mnist, options, resnet50, sample_audit
from training.decode_backend import PIL_CPU
from training.environment import OMP_NUM_THREADS

pytestmark = pytest.mark.timeout(400)
ROOT = str(Path(__file__).parents[2])


def command(module: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"training.{module}", *argv], capture_output=True,
                          text=True, timeout=120, env=run_env(), cwd=ROOT)


def assert_one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_mnist_file_is_one_line(tmp_path):
    write_mnist(tmp_path, train=10, test=10)
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    r = command("mnist", "--data-dir", str(tmp_path), "--epochs", "1")
    assert_one_line_error(r, "t10k-images-idx3-ubyte[.gz] not found in", str(tmp_path))
    assert command("mnist", "--data-dir", str(tmp_path / "nope")).returncode == 2


def test_malformed_tiny_imagenet_is_one_line(tmp_path):
    root = write_tiny_imagenet(tmp_path / "tiny", classes=2, per_class=1, val_per_class=1)
    (root / "val" / "val_annotations.txt").unlink()
    r = command("resnet50", "--data-dir", str(root), "--image-size", "64")
    assert_one_line_error(r, "val_annotations.txt not found")


def test_bad_flag_is_one_line_and_help_exits_zero():
    assert_one_line_error(command("mnist", "--synthetic", "--epochs", "-1"), "--epochs")
    r = command("resnet50", "--help")
    assert r.returncode == 0 and "--image-size" in r.stdout and "--commit-every" in r.stdout


@pytest.mark.horovod
def test_sigterm_then_a_new_job_resumes_from_the_checkpoint(tmp_path):
    data = write_mnist(tmp_path / "mnist", train=200, test=20)
    hold = tmp_path / "hold"
    hold.write_text("")
    ckpt = tmp_path / "ckpt"
    argv = train_args("mnist", data, tmp_path, 3, "--batch-size", "10", "--commit-every", "2",
                      "--checkpoint-dir", str(ckpt), "--debug-step-delay", "0.05",
                      "--debug-hold-file", str(hold), "--debug-sample-log", str(tmp_path / "samples"))
    first = Job(argv, tmp_path / "first.log", cwd=ROOT)
    try:
        first.wait_for(lambda: len(committed_samples(tmp_path / "trace").get(1, ())) >= 60,
                       "60 samples committed in epoch 2")
        first.proc.terminate()
        assert first.finish(60) == 143, first.output()
    finally:
        first.stop()
    assert "SIGTERM: rank 0 leaves the job (exit 143)" in first.output()
    (epoch, processed), _ = checkpoint.latest(ckpt)
    assert epoch == 1 and 60 <= processed < 200
    assert finals(tmp_path / "trace") == []

    hold.unlink()
    second = Job(argv, tmp_path / "second.log", cwd=ROOT)
    try:
        assert second.finish(180) == 0, second.output()
    finally:
        second.stop()
    assert f"(epoch 2, {processed} samples done)" in second.output()
    records = check_finished_run(tmp_path, 200, 3, final_world=1)
    second_records = [r for r in records if r.time >= first_records_end(records)]
    assert [r.epoch for r in second_records if r.event == "epoch"] == [2, 3]
    assert checkpoint.latest(ckpt)[0] == (3, 0)
    # the SIGTERM's commit is the checkpoint the new job resumed from: every sample trained once
    audits = sample_audit.audit(sample_audit.load(tmp_path / "samples"))
    assert sorted(audits) == [0, 1, 2]
    assert all(a.complete and a.ok and a.retrained == 0 for a in audits.values()), \
        [a.summary() for a in audits.values()]
    assert len(audits[1].worlds) == 2  # the epoch the SIGTERM cut, trained by both jobs


def first_records_end(records: list[MetricsRecord]) -> float:
    """The time of the first job's last record (its epoch-1 line)."""
    return min(r.time for r in records if r.event == "epoch" and r.epoch == 1) + 1e-6


@pytest.mark.horovod
def test_resnet50_on_tiny_imagenet_with_two_workers(tmp_path):
    """Two ranks train ResNet-50 on a tiny-imagenet tree to the end, augmenting in the training
    process (no loading processes: the CPU default). Every training image is the same picture,
    so the ranks' first batches differ only if each rank draws its own augmentation."""
    root = write_identical_images(tmp_path / "tiny", classes=3, per_class=4, val_per_class=2)
    argv = [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--network-interface", "lo",
            *train_args("resnet50", root, tmp_path, 2, "--image-size", "64", "--batch-size", "4",
                        "--val-batch-size", "4", "--commit-every", "1", "--log-every", "1",
                        "--warmup-epochs", "1", "--fp16-allreduce")]
    # without the suite's OMP_NUM_THREADS=1 (tests/conftest.py): the trainer sizes its thread
    # pool from this host's cores and workers, as it does for a user (training.cpus)
    env = {k: v for k, v in run_env().items() if k != OMP_NUM_THREADS}
    job = Job(argv, tmp_path / "horovodrun.log", env=env, cwd=ROOT)
    try:
        assert job.finish(300) == 0, job.output()[-4000:]
    finally:
        job.stop()
    # each rank names its JPEG decoder at start (the GPU's or the CPU's: a slow epoch is explained)
    assert job.output().count(f"decode backend: {PIL_CPU}") == 2, job.output()[-4000:]
    records = check_finished_run(tmp_path, 12, 2, final_world=2)
    epochs = [r for r in records if r.event == "epoch"]
    assert all(r.world_size == 2 and r.samples == 12 for r in epochs)
    firsts = [lines[0] for lines in inputs_lines(tmp_path / "trace")]  # epoch 1's first batches
    assert sorted(r["rank"] for r in firsts) == [0, 1], firsts
    assert firsts[0]["sha256"] != firsts[1]["sha256"], "both ranks drew the same augmentation"
    assert all(0.0 <= r.val_accuracy <= 1.0 for r in epochs)
    progress = [r for r in records if r.event == "progress"]
    assert progress and all(r.samples_per_sec > 0 for r in progress)
    # the rate of one worker is 0.1 per 256 samples (0.1 x 4 / 256); warm-up ramps it from
    # there towards 2 x that over the first epoch
    assert progress[0].lr < epochs[-1].lr == pytest.approx(2 * 0.1 * 4 / 256)


@pytest.mark.parametrize("module, argv, code, message", [
    ("mnist", ["--data-dir", "/nonexistent-mnist"], 2,
     "error: MNIST data directory /nonexistent-mnist does not exist"),
    ("resnet50", ["--synthetic", "--amp-dtype", "fp8"], 2,
     "error: argument --amp-dtype: 'fp8' is not one of fp16, bf16 (see train-resnet50 --help)"),
    ("resnet50", ["--synthetic", "--label-smoothing", "1.5"], 2,
     "error: argument --label-smoothing: '1.5' must be in [0, 1) (see train-resnet50 --help)"),
], ids=["missing-dataset", "bad-amp-dtype", "bad-label-smoothing"])
def test_bad_input_exits_2_with_one_line(module, argv, code, message):
    r = command(module, *argv)
    assert (r.returncode, r.stderr) == (code, message + "\n")


@pytest.mark.slow
def test_runtime_failure_exits_1_with_one_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    r = command("mnist", "--synthetic", "--synthetic-size", "64", "--epochs", "1",
                "--checkpoint-dir", str(not_a_dir))
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[-1] == f"error: checkpoint directory {not_a_dir}: Not a directory"
    assert "Traceback" not in r.stderr


def test_augment_on_device_needs_image_files(tmp_path):
    r = command("resnet50", "--synthetic", "--augment-on-device", "--image-size", "64")
    assert_one_line_error(r, "--augment-on-device", "--data-dir")
    root = write_tiny_imagenet(tmp_path / "tiny", classes=2, per_class=1, val_per_class=1)
    assert "--augment-on-device" in command("resnet50", "--help").stdout
    assert not options.parse(["--synthetic"], mnist.DEFAULTS).augment_on_device
    assert options.parse(["--data-dir", str(root), "--augment-on-device"], resnet50.DEFAULTS).augment_on_device
