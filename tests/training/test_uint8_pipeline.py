"""The CPU decode path's uint8 batches (``training.datasets``): the loading processes send
uint8 crops and the training process normalises them on its device in one step.

- the uint8 crop plus ``Normalizer`` equals the float pipeline (torchvision's
  RandomResizedCrop/flip/ToTensor/Normalize, Resize/CenterCrop for validation) under the
  same random stream, within float rounding; in the mixed-precision type and channels_last
  within that type's rounding;
- a reduced JPEG decode (``Image.draft``) keeps the crop geometry: on an image whose colours
  encode the position, the reduced and the full decode give the same crop;
- ResNet-50 on the GPU path (``--debug-gpu-path``, loading processes) trains on uint8 batches.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.training.trainhelp import HOROVODRUN, Job, check_finished_run, train_args, write_tiny_imagenet
from training.datasets import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CropToUint8,
    ImageListDataset,
    Normalizer,
    image_transforms,
    uint8_transforms,
)

ROOT = str(Path(__file__).parents[2])


def photo(path: Path, width: int, height: int, seed: int = 0) -> Path:
    """A JPEG with a smooth random colour field (compresses and resamples like a photo)."""
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    coarse = torch.randint(0, 256, (9, 12, 3), dtype=torch.uint8, generator=g).numpy()
    Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC).save(path, "JPEG", quality=92)
    return path


def position_image(path: Path, width: int, height: int) -> Path:
    """A JPEG whose red channel is x and green channel y (scaled to 0..255): a crop's
    colours tell where it was taken from."""
    from PIL import Image

    x = torch.linspace(0, 255, width).view(1, width).expand(height, width)
    y = torch.linspace(0, 255, height).view(height, 1).expand(height, width)
    rgb = torch.stack([x, y, torch.full_like(x, 128)], dim=2).round().to(torch.uint8)
    Image.fromarray(rgb.numpy()).save(path, "JPEG", quality=95)
    return path


@pytest.mark.parametrize("train", [True, False], ids=["train", "val"])
def test_uint8_crops_normalised_on_the_device_equal_the_float_pipeline(tmp_path, train):
    size = 64
    samples = [(photo(tmp_path / f"{k}.jpg", 160 + 20 * k, 120), k) for k in range(4)]
    ref_tf = image_transforms(size)[0 if train else 1]
    new_tf = uint8_transforms(size)[0 if train else 1]
    ref, new = ImageListDataset(samples, ref_tf), ImageListDataset(samples, new_tf)
    norm = Normalizer(IMAGENET_MEAN, IMAGENET_STD, torch.device("cpu"))
    for seed in range(6):
        i = seed % len(samples)
        torch.manual_seed(seed)
        expected, label = ref[i]
        torch.manual_seed(seed)
        x, label2 = new[i]
        assert x.dtype == torch.uint8 and x.shape == (3, size, size) and label == label2
        got = norm(x.unsqueeze(0))[0]
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    # the mixed-precision type and the model's layout, in the same single step
    batch = torch.stack([new[i][0] for i in range(len(samples))])
    half = Normalizer(IMAGENET_MEAN, IMAGENET_STD, torch.device("cpu"), torch.bfloat16, channels_last=True)(batch)
    assert half.dtype == torch.bfloat16 and half.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(half.float(), norm(batch), rtol=1e-2, atol=2e-2)


class Observed(CropToUint8):
    """Records the size each image was decoded at (the reduced decode's scale)."""

    decoded: list[tuple[int, int]]

    def resample(self, img, original, box):
        self.decoded.append(img.size)
        return super().resample(img, original, box)


@pytest.mark.parametrize("train", [True, False], ids=["train", "val"])
def test_reduced_jpeg_decode_keeps_the_crop_geometry(tmp_path, train):
    width, height, size = 1600, 1200, 64
    path = position_image(tmp_path / "big.jpg", width, height)
    reduced, full = Observed(size, train), Observed(size, train, draft=False)
    reduced.decoded, full.decoded = [], []
    scales = set()
    for seed in range(12):
        torch.manual_seed(seed)
        a = reduced.load(path).float()
        torch.manual_seed(seed)
        b = full.load(path).float()
        scales.add(width // reduced.decoded[-1][0])
        assert full.decoded[-1] == (width, height)
        # same region: position-coded colours agree to a few levels (the reduced decode
        # averages 8x8 blocks where the full one filters)
        assert (a - b).abs().mean() < 2.0, seed
        assert (a - b).abs().max() < 12.0, seed
    assert scales - {1}, "no image was decoded at a reduced scale"


def test_gpu_path_on_the_cpu_trains_on_uint8_batches(tmp_path):
    # 320 px sources at 64 px: most crops are decoded at a reduced scale
    root = write_tiny_imagenet(tmp_path / "tiny", classes=2, per_class=4, val_per_class=2, size=320)
    argv = [HOROVODRUN, "-np", "1", "-H", "localhost:1", "--network-interface", "lo",
            *train_args("resnet50", root, tmp_path, 1, "--image-size", "64", "--batch-size", "4",
                        "--val-batch-size", "4", "--commit-every", "1", "--log-every", "1",
                        "--debug-gpu-path", "--amp-dtype", "bf16", "--workers", "1")]
    job = Job(argv, tmp_path / "horovodrun.log", cwd=ROOT)
    try:
        assert job.finish(300) == 0, job.output()[-4000:]
    finally:
        job.stop()
    records = check_finished_run(tmp_path, 8, 1, final_world=1)
    epochs = [r for r in records if r.event == "epoch"]
    assert epochs and epochs[-1].samples == 8 and 0.0 <= epochs[-1].val_accuracy <= 1.0
    assert all(math.isfinite(r.loss) for r in epochs)
