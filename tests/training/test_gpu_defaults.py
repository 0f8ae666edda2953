"""Defaults the GPU decides when the flags do not: the batch that fits its memory and
``--augment-on-device`` by its JPEG engine (pure functions, tables of real devices'
``torch.cuda.get_device_properties``), and how ``options`` applies them."""

from __future__ import annotations

import pytest

from training import mnist, options, resnet50
from training.cli import device_line
from training.gpu_defaults import (
    MIB,
    DeviceInfo,
    activation_bytes,
    augment_on_device_default,
    fit_batch_size,
    has_jpeg_engine,
)

# name, capability, total_memory as torch reports it (bytes)
T4 = DeviceInfo("Tesla T4", (7, 5), 15_642_329_088)
V100_16 = DeviceInfo("Tesla V100-SXM2-16GB", (7, 0), 16_935_682_048)
V100_32 = DeviceInfo("Tesla V100-SXM2-32GB", (7, 0), 34_089_730_048)
A10G = DeviceInfo("NVIDIA A10G", (8, 6), 23_836_229_632)
L4 = DeviceInfo("NVIDIA L4", (8, 9), 23_580_639_232)
L40S = DeviceInfo("NVIDIA L40S", (8, 9), 47_697_362_944)
RTX4090 = DeviceInfo("NVIDIA GeForce RTX 4090", (8, 9), 25_386_352_640)
RTX3060 = DeviceInfo("NVIDIA GeForce RTX 3060", (8, 6), 12_630_294_528)
RTX3070 = DeviceInfo("NVIDIA GeForce RTX 3070", (8, 6), 8_363_048_960)
A100_40 = DeviceInfo("NVIDIA A100-SXM4-40GB", (8, 0), 42_505_273_344)
A100_80 = DeviceInfo("NVIDIA A100-SXM4-80GB", (8, 0), 85_100_068_864)
H100 = DeviceInfo("NVIDIA H100 80GB HBM3", (9, 0), 85_031_714_816)
H200 = DeviceInfo("NVIDIA H200", (9, 0), 150_754_820_096)
B200 = DeviceInfo("NVIDIA B200", (10, 0), 191_476_809_728)
RTX5090 = DeviceInfo("NVIDIA GeForce RTX 5090", (12, 0), 33_668_988_928)

D = resnet50.DEFAULTS


@pytest.mark.parametrize("device, amp, size, batch", [
    (T4, True, 224, 128),        # 256 x 41.7 MiB = 10.4 GiB + 4 GiB > 90 % of 14.6 GiB
    (V100_16, True, 224, 128),
    (V100_32, True, 224, 256),
    (A10G, True, 224, 256),
    (L4, True, 224, 256),
    (A100_40, True, 224, 256),
    (H100, True, 224, 256),
    (RTX3060, True, 224, 128),
    (RTX3070, True, 224, 64),
    (T4, False, 224, 64),        # fp32: twice the activations
    (T4, True, 160, 256),        # half the pixels
    (A100_40, False, 224, 256),
])
def test_resnet50_batch_that_fits(device, amp, size, batch):
    per_image = activation_bytes(D.gpu_image_bytes, size, amp)
    assert fit_batch_size(device.total_memory, per_image, D.gpu_fixed_bytes, 256) == batch


def test_fit_batch_size_edges():
    assert fit_batch_size(100, 200, 0, 256) == 1            # nothing fits: still one
    assert fit_batch_size(10**12, 1, 0, 200) == 200         # the model's own, not a power of two
    assert fit_batch_size(150, 1, 0, 200) == 128
    assert activation_bytes(int(41.7 * MIB), 224, True) == int(41.7 * MIB)


@pytest.mark.parametrize("device, engine", [
    (A100_40, True), (A100_80, True), (H100, True), (H200, True), (B200, True),
    (L4, True), (L40S, True),
    (T4, False), (A10G, False), (V100_16, False), (RTX4090, False), (RTX3060, False),
    (RTX5090, False),
])
def test_augment_on_device_by_jpeg_engine(device, engine):
    assert has_jpeg_engine(device.name, device.capability) is engine
    assert augment_on_device_default(device) is engine
    assert augment_on_device_default(None) is False


def test_flag_given_or_not():
    parse = options.parse
    assert parse(["--data-dir", "/x"], D).augment_on_device is None  # the device decides
    assert parse(["--data-dir", "/x", "--augment-on-device"], D).augment_on_device is True
    assert parse(["--data-dir", "/x", "--no-augment-on-device"], D).augment_on_device is False
    assert parse(["--synthetic"], D).augment_on_device is False  # nothing to decode
    assert parse(["--synthetic"], mnist.DEFAULTS).augment_on_device is False


def test_env_sets_the_flag(monkeypatch):
    monkeypatch.setenv("TRAIN_AUGMENT_ON_DEVICE", "0")
    assert options.parse(["--data-dir", "/x"], D).augment_on_device is False
    monkeypatch.setenv("TRAIN_AUGMENT_ON_DEVICE", "1")
    assert options.parse(["--data-dir", "/x"], D).augment_on_device is True


@pytest.mark.parametrize("device, argv, batch, lr, augment", [
    (T4, [], 128, 0.05, False),
    (A100_40, [], 256, 0.1, True),
    (A10G, [], 256, 0.1, False),
    (T4, ["--batch-size", "256"], 256, 0.1, False),          # given: kept, even if it may not fit
    (T4, ["--augment-on-device"], 128, 0.05, True),
    (H100, ["--no-augment-on-device", "--lr", "0.2"], 256, 0.2, False),
    (T4, ["--no-amp"], 64, 0.025, False),
])
def test_resolve_device_defaults(device, argv, batch, lr, augment):
    cfg = options.resolve_device_defaults(options.parse(["--data-dir", "/x", *argv], D), D,
                                          cuda=True, device=device)
    assert (cfg.batch_size, cfg.lr, cfg.augment_on_device) == (batch, pytest.approx(lr), augment)


def test_the_cpu_decides_off():
    cfg = options.resolve_device_defaults(options.parse(["--data-dir", "/x"], D), D, cuda=False)
    assert (cfg.batch_size, cfg.augment_on_device) == (32, False)


def test_device_line_says_what_and_why():
    args = options.parse(["--data-dir", "/x"], D)
    cfg = options.resolve_device_defaults(args, D, cuda=True, device=T4)
    assert device_line(T4, cfg, D, augment_decided=True) == (
        "Tesla T4 (14.6 GiB, 7.5): --batch-size 128 (256 does not fit), "
        "--augment-on-device off (no hardware JPEG decoder)")
    cfg = options.resolve_device_defaults(args, D, cuda=True, device=H100)
    assert device_line(H100, cfg, D, augment_decided=True) == (
        "NVIDIA H100 80GB HBM3 (79.2 GiB, 9.0): --batch-size 256, "
        "--augment-on-device on (hardware JPEG decoder)")
