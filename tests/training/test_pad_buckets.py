"""Size buckets of the device augmentation (``training.device_augment.pad_buckets``): a batch
of mixed sizes is resampled by one padded ``roi_align`` per bucket, each bucket padded to its
own largest height and width within ``PAD_LIMIT`` times its pixels. On ImageNet a batch of
256 almost always holds a very large photo among ~500x375 ones: a few buckets, not one call
per distinct size (tens per batch)."""

from __future__ import annotations

import random

import pytest
import torch

from training.device_augment import PAD_LIMIT, DeviceAugment, crop_boxes, pad_buckets

CPU = torch.device("cpu")
# ImageNet-like (height, width): mostly 500 on the long side, both orientations, a few odd ones
TYPICAL = [(375, 500)] * 40 + [(500, 375)] * 12 + [(333, 500)] * 14 + [(500, 333)] * 5 + \
          [(500, 500)] * 4 + [(366, 500), (400, 500), (281, 500), (500, 400), (480, 640),
                              (640, 480), (300, 450), (256, 341), (768, 1024), (200, 300)]


def imagenet_like(n: int, seed: int, outliers=()) -> tuple[list[int], list[int]]:
    rnd = random.Random(seed)
    sizes = [rnd.choice(TYPICAL) for _ in range(n - len(outliers))] + list(outliers)
    rnd.shuffle(sizes)
    return [h for h, _ in sizes], [w for _, w in sizes]


def check_partition(buckets, heights, widths, limit):
    assert sorted(i for b in buckets for i in b) == list(range(len(heights)))  # each index once
    for b in buckets:
        assert b == sorted(b)
        padded = len(b) * max(heights[i] for i in b) * max(widths[i] for i in b)
        assert padded <= limit * sum(heights[i] * widths[i] for i in b)


@pytest.mark.parametrize("outliers", [((2000, 3000),), ((2000, 3000), (3000, 2000)),
                                      ((2000, 3000), (4000, 2600), (1200, 1600))],
                         ids=["one-3000x2000", "two-3000x2000", "three-large"])
@pytest.mark.parametrize("seed", range(5))
def test_imagenet_batches_with_large_outliers_take_a_few_buckets(outliers, seed):
    heights, widths = imagenet_like(256, seed, outliers)
    buckets = pad_buckets(heights, widths, PAD_LIMIT)
    check_partition(buckets, heights, widths, PAD_LIMIT)
    assert len(buckets) <= 4, [len(b) for b in buckets]
    # the old rule: one call per distinct size once the whole batch did not fit
    assert len({(h, w) for h, w in zip(heights, widths, strict=True)}) > 10


def test_landscape_and_portrait_share_a_bucket_and_a_uniform_batch_is_one():
    heights, widths = [375, 500] * 8, [500, 375] * 8
    assert pad_buckets(heights, widths, PAD_LIMIT) == [list(range(16))]
    assert pad_buckets([64] * 5, [64] * 5, PAD_LIMIT) == [list(range(5))]
    assert pad_buckets([], [], PAD_LIMIT) == []
    heights, widths = [375, 3000, 500, 375], [500, 2000, 375, 500]
    buckets = pad_buckets(heights, widths, PAD_LIMIT)
    check_partition(buckets, heights, widths, PAD_LIMIT)
    assert [0, 2, 3] in buckets or any({0, 2, 3} <= set(b) for b in buckets)


def test_every_bucket_within_the_limit_on_random_sizes():
    rnd = random.Random(3)
    for _ in range(200):
        n = rnd.randint(1, 40)
        heights = [rnd.randint(1, 3000) for _ in range(n)]
        widths = [rnd.randint(1, 3000) for _ in range(n)]
        for limit in (1.0, 1.5, PAD_LIMIT):
            check_partition(pad_buckets(heights, widths, limit), heights, widths, limit)


def test_bucketed_resample_equals_one_roi_align_per_image_and_calls_it_per_bucket(monkeypatch):
    """A mixed batch with a large outlier: the result equals one ``roi_align`` per image, in
    the batch's order, from one call per bucket (the old rule made one per distinct size)."""
    import torchvision.ops

    from tests.training.test_device_augment import per_image

    g = torch.Generator().manual_seed(5)
    sizes = [(60, 80), (80, 60), (600, 400), (60, 80), (50, 70), (70, 50), (64, 64), (56, 75),
             (75, 56), (60, 80)]
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
    heights = torch.tensor([h for h, _ in sizes])
    widths = torch.tensor([w for _, w in sizes])
    boxes = crop_boxes(torch.Generator().manual_seed(6), heights, widths)
    boxes[2] = torch.tensor([0.0, 0.0, 400.0, 600.0], dtype=torch.float64)  # the whole outlier
    boxes[0] = torch.tensor([20.0, 10.0, 80.0, 60.0], dtype=torch.float64)  # a bottom-right corner
    aug = DeviceAugment(32, CPU)
    want = per_image(aug, images, boxes)
    calls = []
    real = torchvision.ops.roi_align

    def counting(*a, **k):
        calls.append(a[0].shape[0])
        return real(*a, **k)

    monkeypatch.setattr(torchvision.ops, "roi_align", counting)
    got = aug._resample(images, boxes)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(got, want, atol=1e-3)
    buckets = pad_buckets(heights.tolist(), widths.tolist(), PAD_LIMIT)
    assert len(buckets) == 2
    assert sorted(calls) == sorted(len(b) for b in buckets)
