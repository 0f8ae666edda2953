"""``--augment-on-device`` on the CPU: the code the GPU runs, only the device differs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from PIL import Image

from tests.training.trainhelp import write_tiny_imagenet
from training.datasets import IMAGENET_MEAN, IMAGENET_STD
from training.device_augment import (
    DeviceAugment,
    JpegBytesDataset,
    PackedImages,
    collate_bytes,
    cpu_decode,
    crop_boxes,
    torchcodec_decoder,
)
from training.errors import DatasetError, DeviceError
from training.imagefolder import scan
from training.seeding import stream_seed

CPU = torch.device("cpu")


def textured(path, w: int = 64, h: int = 64, seed: int = 0, fmt: str = "JPEG"):
    rnd = random.Random(seed)
    Image.frombytes("RGB", (w, h), rnd.randbytes(w * h * 3)).save(path, fmt, quality=95)
    return path


def batch_of(tmp_path, count: int = 6, sizes=((64, 64),)):
    samples = []
    for k in range(count):
        w, h = sizes[k % len(sizes)]
        samples.append((str(textured(tmp_path / f"{k}.JPEG", w, h, seed=k)), k % 3))
    ds = JpegBytesDataset(samples)
    return collate_bytes([ds[i] for i in range(len(ds))])


def augmented(images, seed: int, rank: int, epoch: int, resets: int, size: int = 64):
    aug = DeviceAugment(size, CPU)
    aug.reseed(stream_seed(seed, rank, epoch, resets))
    return aug.train(images)


def test_loading_side_reads_bytes_without_decoding(tmp_path):
    path = textured(tmp_path / "a.JPEG")
    png = textured(tmp_path / "b.png", 20, 10, fmt="PNG")
    ds = JpegBytesDataset([(str(path), 1), (str(png), 2)])
    data, label, name = ds[0]
    assert data.dtype == torch.uint8 and data.ndim == 1
    assert bytes(data.numpy()) == path.read_bytes() and int(label) == 1 and name == str(path)
    decoded, label, _ = ds[1]  # not a JPEG: decoded here, RGB
    assert decoded.shape == (3, 10, 20) and decoded.dtype == torch.uint8 and int(label) == 2
    images, labels, paths = collate_bytes([ds[0], ds[1]])
    assert images.num_images == 2 and labels.tolist() == [1, 2] and paths == [str(path), str(png)]
    # one uint8 tensor with offsets, not a tensor per image
    assert isinstance(images, PackedImages) and images.data.dtype == torch.uint8
    assert images.data.ndim == 1 and images.offsets.tolist()[0] == 0
    first, second = images.unpack()
    assert bytes(first.numpy()) == path.read_bytes() and torch.equal(second, decoded)


@pytest.mark.parametrize("size", [64, 96])
def test_train_batch_shape_dtype_and_normalisation(tmp_path, size):
    colours = [(200, 30, 90), (10, 250, 128), (128, 128, 128)]
    samples = []
    for k, c in enumerate(colours):
        # an image of one colour: every crop of it, flipped or not, is that colour
        Image.new("RGB", (64 + 16 * k, 64), c).save(tmp_path / f"{k}.JPEG", "JPEG", quality=100)
        samples.append((str(tmp_path / f"{k}.JPEG"), k))
    ds = JpegBytesDataset(samples)
    images, labels, _ = collate_bytes([ds[i] for i in range(3)])
    aug = DeviceAugment(size, CPU)
    aug.reseed(1)
    for x in (aug.train(images), aug.val(images)):
        assert x.shape == (3, 3, size, size) and x.dtype == torch.float32 and x.device == CPU
        for k, c in enumerate(colours):
            want = [(c[ch] / 255 - IMAGENET_MEAN[ch]) / IMAGENET_STD[ch] for ch in range(3)]
            got = x[k].mean(dim=(1, 2)).tolist()
            # JPEG may move a flat colour by a level or two
            assert got == pytest.approx(want, abs=3 / 255 / 0.224), (k, got, want)
            assert float(x[k].std(dim=(1, 2)).max()) < 0.05


def test_validation_equals_resize_and_center_crop(tmp_path):
    from torchcodec.decoders import decode_jpeg
    from torchvision.transforms.v2 import functional as F

    images, _, _ = batch_of(tmp_path, 3, sizes=((64, 64), (80, 60), (50, 70)))
    x = DeviceAugment(64, CPU).val(images)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    for k, data in enumerate(images.unpack()):
        ref = F.center_crop(F.resize(decode_jpeg(data).float(), 73), 64)
        assert torch.allclose((ref / 255 - mean) / std, x[k], atol=1e-3)


def test_crop_boxes_follow_random_resized_crop():
    g = torch.Generator().manual_seed(0)
    n = 2000
    h = torch.tensor([64, 40, 300, 10] * (n // 4))
    w = torch.tensor([64, 90, 200, 200] * (n // 4))
    boxes = crop_boxes(g, h, w)
    bw, bh = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all()
    assert (boxes[:, 2] <= w).all() and (boxes[:, 3] <= h).all()
    assert (bw >= 1).all() and (bh >= 1).all()
    assert (boxes == boxes.round()).all()  # integer pixel offsets and sizes, as torchvision
    fraction = (bw * bh) / (w * h)
    assert fraction.max() <= 1.0 and fraction[h == 64].min() >= 0.07
    ratio = (bw / bh)[h == 300]
    assert ratio.min() >= 0.7 and ratio.max() <= 1.4
    # 10 x 200 cannot hold a crop of ratio <= 4/3 at 8 % of the area or more: central crop
    thin = boxes[(h == 10) & (w == 200)]
    assert (thin[:, 3] - thin[:, 1] == 10).all() and (thin[:, 2] - thin[:, 0] == 13).all()


def test_device_stream_is_per_seed_rank_epoch_and_reset(tmp_path):
    images, _, _ = batch_of(tmp_path, 8)
    base = augmented(images, 42, 0, 0, 0)
    assert torch.equal(base, augmented(images, 42, 0, 0, 0))
    for other in [(43, 0, 0, 0), (42, 1, 0, 0), (42, 0, 1, 0), (42, 0, 0, 1)]:
        assert not torch.equal(base, augmented(images, *other)), other
    aug = DeviceAugment(64, CPU)
    aug.reseed(5)
    first, second = aug.train(images), aug.train(images)
    assert not torch.equal(first, second)  # the stream goes on within an epoch


def test_corrupt_jpeg_names_the_file(tmp_path):
    good = textured(tmp_path / "good.JPEG")
    bad = tmp_path / "bad.JPEG"
    bad.write_bytes(good.read_bytes()[:40] + b"\x00" * 100)  # a JPEG header, then junk
    ds = JpegBytesDataset([(str(good), 0), (str(bad), 1)])
    images, _, paths = collate_bytes([ds[0], ds[1]])
    with pytest.raises(DatasetError, match="bad.JPEG: cannot decode image"):
        DeviceAugment(64, CPU).train(images, paths)


def test_tiny_imagenet_layout_reads_through_the_dataset(tmp_path):
    root = write_tiny_imagenet(tmp_path / "tiny", classes=2, per_class=3, val_per_class=1)
    found = scan(root)
    ds = JpegBytesDataset(found.train)
    images, labels, _ = collate_bytes([ds[i] for i in range(len(ds))])
    aug = DeviceAugment(64, CPU)
    assert aug.train(images).shape == (6, 3, 64, 64)
    assert labels.tolist() == [label for _, label in found.train]


def test_packed_batches_cross_from_real_loader_processes(tmp_path):
    """Through forkserver loading processes (``training.loaders``), a batch arrives as one
    data tensor plus offsets, and decodes to what the files hold."""
    from training.loaders import make_loader

    samples = [(str(textured(tmp_path / f"{k}.JPEG", 40 + 8 * k, 32, seed=k)), k) for k in range(5)]
    samples.append((str(textured(tmp_path / "p.png", 24, 16, fmt="PNG")), 5))
    ds = JpegBytesDataset(samples)
    loader = make_loader(ds, [[0, 1, 2], [3, 4, 5]], workers=1, pin_memory=False,
                         collate_fn=collate_bytes)
    batches = list(loader)
    assert len(batches) == 2
    for (images, labels, paths), idx in zip(batches, [[0, 1, 2], [3, 4, 5]], strict=True):
        assert isinstance(images, PackedImages) and images.data.ndim == 1
        assert images.offsets.shape == (4,) and labels.tolist() == idx
        assert paths == [samples[i][0] for i in idx]
        for item, i in zip(images.unpack(), idx, strict=True):
            if samples[i][0].endswith(".JPEG"):
                assert bytes(item.numpy()) == Path(samples[i][0]).read_bytes()
            else:
                assert item.shape == (3, 16, 24)
        out = DeviceAugment(32, CPU).val(images, paths)
        assert out.shape == (3, 3, 32, 32)


def failing_decoder(data, device):
    raise RuntimeError("nvjpeg: NVJPEG_STATUS_NOT_INITIALIZED\nmore detail")


def rejecting(reject: set[bytes]):
    """A device decoder (torchcodec on the CPU) that refuses the JPEGs in ``reject``, as
    nvJPEG refuses CMYK files, and counts its calls."""
    calls = []

    def decode(data, device):
        calls.append(len(data))
        if any(bytes(t.numpy()) in reject for t in data):
            raise RuntimeError("nvjpeg: unsupported JPEG")
        return torchcodec_decoder(data, device)
    decode.calls = calls  # type: ignore[attr-defined]
    return decode


def test_self_check_fails_with_the_cause():
    with pytest.raises(DeviceError) as err:
        DeviceAugment(64, torch.device("cuda"), decoder=failing_decoder).self_check()
    message = str(err.value)
    assert message == ("--augment-on-device cannot decode JPEGs on cuda: RuntimeError: nvjpeg: "
                       "NVJPEG_STATUS_NOT_INITIALIZED (a torchcodec built without CUDA, or nvJPEG "
                       "failed to start); with --no-augment-on-device the loading processes "
                       "decode on the CPU")

    def wrong_colours(data, device):
        return [torch.zeros((3, 16, 16), dtype=torch.uint8)]
    with pytest.raises(DeviceError, match="decoded as shape"):
        DeviceAugment(64, CPU, decoder=wrong_colours).self_check()
    DeviceAugment(64, CPU).self_check()  # torchcodec on the CPU works


def test_rejected_images_fall_back_to_the_cpu_and_are_counted(tmp_path):
    rgb = [textured(tmp_path / f"{k}.JPEG", 48, 40, seed=k) for k in range(4)]
    cmyk = tmp_path / "cmyk.JPEG"
    Image.open(rgb[0]).convert("CMYK").save(cmyk, "JPEG", quality=95)
    samples = [(str(p), 0) for p in [rgb[0], cmyk, rgb[1], rgb[2], rgb[3]]]
    ds = JpegBytesDataset(samples)
    images, _, paths = collate_bytes([ds[i] for i in range(len(ds))])
    # the CMYK one never reaches the device decoder: the loading side decodes it (test_cmyk)
    assert [t.ndim for t in images.unpack()] == [1, 3, 1, 1, 1]
    decoder = rejecting({rgb[3].read_bytes(), rgb[2].read_bytes()})
    aug = DeviceAugment(32, CPU, decoder=decoder)
    decoded = aug.decode(images, paths)
    assert aug.fallbacks == 2 and decoder.calls == [4, 1, 1, 1, 1]
    for item, t in zip(images.unpack(), decoded, strict=True):
        want = cpu_decode(item) if item.ndim == 1 else item
        assert torch.equal(t, want) or (t.float() - want.float()).abs().mean() < 2
    assert aug.val(images, paths).shape == (5, 3, 32, 32) and aug.take_fallbacks() == 4
    assert aug.fallbacks == 0


def test_dataset_error_only_when_the_cpu_cannot_decode_either(tmp_path):
    good = textured(tmp_path / "good.JPEG")
    bad = tmp_path / "bad.JPEG"
    bad.write_bytes(good.read_bytes()[:40] + b"\x00" * 100)
    ds = JpegBytesDataset([(str(good), 0), (str(bad), 1)])
    images, _, paths = collate_bytes([ds[0], ds[1]])
    aug = DeviceAugment(64, CPU, decoder=rejecting({bad.read_bytes()}))
    with pytest.raises(DatasetError, match=r"bad.JPEG: cannot decode image: .*\(on cpu: nvjpeg: "
                                           r"unsupported JPEG\)$"):
        aug.train(images, paths)


def test_output_is_channels_last(tmp_path):
    images, _, _ = batch_of(tmp_path, 8)
    aug = DeviceAugment(64, CPU)
    aug.reseed(0)
    for x in (aug.train(images), aug.val(images)):
        assert x.is_contiguous(memory_format=torch.channels_last)


def test_one_padded_roi_align_equals_one_call_per_size(tmp_path):
    images, _, _ = batch_of(tmp_path, 6, sizes=((64, 64), (80, 60), (50, 70), (64, 48)))
    aug = DeviceAugment(48, CPU)
    decoded = aug.decode(images)
    h = torch.tensor([t.shape[1] for t in decoded])
    w = torch.tensor([t.shape[2] for t in decoded])
    boxes = crop_boxes(torch.Generator().manual_seed(4), h, w)
    boxes[0] = torch.tensor([0.0, 0.0, 64.0, 64.0], dtype=torch.float64)  # to the edges
    boxes[1] = torch.tensor([30.0, 20.0, 80.0, 60.0], dtype=torch.float64)  # bottom-right corner
    one = aug._resample(decoded, boxes)
    assert one.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(one, per_image(aug, decoded, boxes), atol=1e-4)


def per_image(aug, images, boxes):
    """The reference: one ``roi_align`` per image, at its own size."""
    from torchvision.ops import roi_align

    return torch.cat([roi_align(t[None].float(), torch.cat([torch.zeros(1, 1, dtype=torch.float64),
                                                            boxes[i:i + 1]], dim=1).float(),
                                (aug.size, aug.size), spatial_scale=1.0, sampling_ratio=-1,
                                aligned=True) for i, t in enumerate(images)])
