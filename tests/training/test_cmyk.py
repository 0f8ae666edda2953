"""CMYK JPEGs on the device path: nvJPEG's colour conversion expects YCbCr or grayscale and may
return wrong colours for a CMYK/YCCK JPEG instead of an error. The loading processes read each
JPEG's header (``training.jpeg_header``) and decode those with PIL on the CPU, so they never
reach the device decoder. Forced on the CPU with a decoder that behaves as feared (wrong
colours for 4 components, no error)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from training.device_augment import DeviceAugment, JpegBytesDataset, collate_bytes, cpu_decode
from training.jpeg_header import colour_coding, needs_cpu_decode

CPU = torch.device("cpu")


def jpeg(mode: str, colour, size=(32, 24), **save) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, colour).save(buf, "JPEG", quality=95, **save)
    return buf.getvalue()


def with_app1(data: bytes, payload: bytes) -> bytes:
    """``data`` with an APP1 segment holding ``payload`` right after SOI."""
    segment = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    return data[:2] + segment + data[2:]


@pytest.mark.parametrize("data, components, cpu", [
    (jpeg("RGB", (10, 200, 30)), 3, False),
    (jpeg("L", 128), 1, False),
    (jpeg("RGB", (10, 200, 30), progressive=True), 3, False),
    (jpeg("CMYK", (0, 200, 100, 30)), 4, True),
    # an EXIF-like APP1 holding a CMYK JPEG (a thumbnail): skipped, the frame is YCbCr
    (with_app1(jpeg("RGB", (1, 2, 3)), b"Exif\x00\x00" + jpeg("CMYK", (0, 0, 0, 0))), 3, False),
])
def test_header_colour_coding(data, components, cpu):
    coding = colour_coding(data)
    assert coding is not None and coding.components == components
    assert needs_cpu_decode(data) is cpu
    assert needs_cpu_decode(torch.frombuffer(bytearray(data), dtype=torch.uint8).numpy()) is cpu


def test_adobe_rgb_coded_and_malformed_headers():
    ycc = jpeg("RGB", (10, 200, 30))
    adobe_rgb = with_app1(ycc, b"")[:2] + b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x00" + ycc[2:]
    assert colour_coding(adobe_rgb) == (3, 0) and needs_cpu_decode(adobe_rgb)
    for bad in (b"", b"\xff\xd8", b"not a jpeg at all", ycc[:20], b"\xff\xd8\xff\xe0\x00\x01"):
        assert not needs_cpu_decode(bad)


def nvjpeg_like(calls: list):
    """torchcodec on the CPU, except that a 4-component JPEG comes back inverted and no error
    is raised: what the device path must not trust."""
    from torchcodec.decoders import decode_jpeg

    def decode(data, device):
        calls.append(len(data))
        out = []
        for t in data:
            img = decode_jpeg(t, mode="RGB")
            coding = colour_coding(t.numpy())
            out.append(255 - img if coding and coding.components == 4 else img)
        return out
    return decode


def batch(tmp_path):
    files = [("a.jpg", jpeg("RGB", (200, 40, 120), (64, 64))),
             ("cmyk.jpg", jpeg("CMYK", (0, 200, 100, 30), (64, 64))),
             ("b.jpg", jpeg("RGB", (30, 90, 220), (64, 64)))]
    samples = []
    for name, data in files:
        (tmp_path / name).write_bytes(data)
        samples.append((str(tmp_path / name), 0))
    ds = JpegBytesDataset(samples)
    return collate_bytes([ds[i] for i in range(len(ds))])


def test_cmyk_goes_to_pil_and_keeps_its_colours(tmp_path):
    images, _, paths = batch(tmp_path)
    items = images.unpack()
    assert [t.ndim for t in items] == [1, 3, 1]  # the CMYK one decoded by the loading process
    want = cpu_decode(torch.frombuffer(bytearray(Path(paths[1]).read_bytes()), dtype=torch.uint8))
    calls: list[int] = []
    aug = DeviceAugment(64, CPU, decoder=nvjpeg_like(calls))
    out = aug.decode(images, paths)
    assert calls == [2]  # one batched call, without the CMYK image
    assert torch.equal(out[1], want)
    assert [tuple(t.shape) for t in out] == [(3, 64, 64)] * 3


def test_the_decoder_feared_gets_cmyk_colours_wrong_silently(tmp_path):
    """The failure the route prevents: given the CMYK bytes, it raises nothing and the colours
    are wrong (the test's stand-in for nvJPEG behaves as feared)."""
    data = jpeg("CMYK", (0, 200, 100, 30), (64, 64))
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    got = DeviceAugment(64, CPU, decoder=nvjpeg_like([])).decode([t])[0].float()
    assert float((got - cpu_decode(t).float()).abs().mean()) > 50
