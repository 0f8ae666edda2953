"""ResNet-50's recipe defaults: Goyal et al. (2017), "Accurate, Large Minibatch SGD", the
recipe whose warm-up and linear scaling rule the schedule follows: momentum 0.9, weight
decay 1e-4 (5e-5 before: half the reference), 0.1 per 256 samples, 5 warm-up epochs."""

import pytest

from training import options, resnet50


def test_resnet50_follows_goyal_et_al():
    cfg = options.parse(["--synthetic"], resnet50.DEFAULTS)
    assert (cfg.momentum, cfg.weight_decay, cfg.warmup_epochs) == (0.9, 1e-4, 5.0)
    assert cfg.norm_weight_decay == 0.0  # no decay on BatchNorm and biases (torchvision, NVIDIA)
    gpu = options.resolve_device_defaults(cfg, resnet50.DEFAULTS, cuda=True)
    assert (gpu.batch_size, gpu.lr) == (256, pytest.approx(0.1))
