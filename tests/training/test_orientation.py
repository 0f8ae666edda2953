"""One orientation rule on every decode path: a JPEG with an EXIF rotation trains upright on
the loading processes' PIL path (reduced decode or not), on the device path (torchcodec, which
applies EXIF orientation on the CPU and on CUDA) and on its PIL fallback alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from training.datasets import ImageListDataset, exif_orientation, uint8_transforms
from training.device_augment import DeviceAugment, JpegBytesDataset, collate_bytes, cpu_decode

BLUE, RED = (0, 0, 255), (255, 0, 0)


def rotated_jpeg(path, orientation: int, w: int = 1024, h: int = 512):
    """Stored ``w`` x ``h`` with the left half blue, the right half red, and an EXIF
    orientation: 6 (rotate 90 degrees clockwise to view) shows it ``h`` x ``w``, blue on top."""
    img = Image.new("RGB", (w, h), RED)
    img.paste(Image.new("RGB", (w // 2, h), BLUE), (0, 0))
    exif = Image.Exif()
    exif[0x0112] = orientation
    img.save(path, "JPEG", quality=95, exif=exif)
    return str(path)


def colour_of(row: torch.Tensor) -> tuple[int, ...]:
    """The mean colour of a (3, W) uint8/float row, rounded."""
    return tuple(round(v) for v in row.float().mean(dim=1).tolist())


def close(got, want, tol=40):
    return all(abs(g - w) <= tol for g, w in zip(got, want, strict=True))


def upright_blue_on_top(image: torch.Tensor) -> bool:
    """A (3, H, W) image of the rotated picture viewed upright: blue top row, red bottom row."""
    return close(colour_of(image[:, 0, :]), BLUE) and close(colour_of(image[:, -1, :]), RED)


def test_pil_reads_the_orientation(tmp_path):
    with Image.open(rotated_jpeg(tmp_path / "a.jpg", 6)) as img:
        assert exif_orientation(img) == 6 and img.size == (1024, 512)


@pytest.mark.parametrize("draft", [True, False], ids=["reduced-decode", "full-decode"])
def test_loading_process_path_is_upright(tmp_path, draft):
    path = rotated_jpeg(tmp_path / "a.jpg", 6)
    _, val = uint8_transforms(64, draft=draft)
    x, _ = ImageListDataset([(path, 0)], val)[0]
    assert x.shape == (3, 64, 64) and upright_blue_on_top(x)


def test_train_crops_are_drawn_on_the_upright_size(tmp_path):
    """RandomResizedCrop's box fits the upright image (512 x 1024), with and without the
    reduced decode: the same pixels either way (the crop's geometry does not depend on it)."""
    path = rotated_jpeg(tmp_path / "a.jpg", 8)
    for seed in range(5):
        outs = []
        for draft in (True, False):
            train, _ = uint8_transforms(64, draft=draft)
            torch.manual_seed(seed)
            outs.append(ImageListDataset([(path, 0)], train)[0][0].float())
        assert (outs[0] - outs[1]).abs().mean() < 8


def test_device_path_and_its_cpu_fallback_are_upright(tmp_path):
    path = rotated_jpeg(tmp_path / "a.jpg", 6)
    images, _, paths = collate_bytes([JpegBytesDataset([(path, 0)])[0]])
    raw = images.unpack()[0]
    assert cpu_decode(raw).shape == (3, 1024, 512)  # the PIL fallback: upright
    device = DeviceAugment(64, torch.device("cpu"))  # torchcodec on the CPU
    assert device.decode(images)[0].shape == (3, 1024, 512)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1) * 255
    assert upright_blue_on_top(device.val(images)[0] * std + mean)

    def refuses(data, dev):
        raise RuntimeError("nvjpeg: refused")
    fallback = DeviceAugment(64, torch.device("cpu"), decoder=refuses)
    assert upright_blue_on_top(fallback.val(images, paths)[0] * std + mean)
    assert fallback.take_fallbacks() == 1


def test_every_orientation_agrees_between_pil_and_torchcodec(tmp_path):
    from torchcodec.decoders import decode_jpeg

    for orientation in range(1, 9):
        path = rotated_jpeg(tmp_path / f"{orientation}.jpg", orientation, 96, 48)
        data = torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8)
        pil, codec = cpu_decode(data), decode_jpeg(data, mode="RGB")
        assert pil.shape == codec.shape, orientation
        assert (pil.float() - codec.float()).abs().mean() < 3, orientation
