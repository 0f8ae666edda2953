"""Validation's batch on a GPU. ResNet-50's model default (32) made an
ImageNet validation pass on 64 GPUs take about as long as an epoch of training; on CUDA an
unset ``--val-batch-size`` is now at least the training batch (evaluation keeps no saved
activations, so what fits one training step fits one validation step). Given, it is kept;
on the CPU the model's value stays."""
from __future__ import annotations

import pytest

from training import mnist, options, resnet50
from training.gpu_defaults import DeviceInfo

T4 = DeviceInfo("Tesla T4", (7, 5), 15_642_329_088)
H100 = DeviceInfo("NVIDIA H100 80GB HBM3", (9, 0), 85_045_870_592)
R = resnet50.DEFAULTS


def resolved(argv: list[str], d: options.Defaults = R, cuda: bool = True,
             device: DeviceInfo | None = H100) -> options.TrainConfig:
    return options.resolve_device_defaults(options.parse(["--synthetic", *argv], d), d,
                                           cuda=cuda, device=device)


@pytest.mark.parametrize("device, argv, val", [
    (H100, [], 256),                          # the device's training batch, not 32
    (T4, [], 128),                            # what fits a 16 GB card
    (H100, ["--batch-size", "64"], 64),       # follows a given training batch
    (H100, ["--val-batch-size", "16"], 16),   # given: kept
])
def test_on_cuda_validation_takes_at_least_the_training_batch(device, argv, val):
    assert resolved(argv, device=device).val_batch_size == val


def test_the_cpu_keeps_the_models_value():
    assert resolved([], cuda=False, device=None).val_batch_size == R.val_batch_size == 32


def test_a_model_value_above_the_training_batch_is_kept():
    """MNIST validates at 1,000 a step, above its training batch: never lowered."""
    assert resolved([], d=mnist.DEFAULTS, device=None).val_batch_size == 1000


def test_the_environment_counts_as_given(monkeypatch):
    monkeypatch.setenv("TRAIN_VAL_BATCH_SIZE", "8")
    assert resolved([]).val_batch_size == 8
