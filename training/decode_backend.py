"""Which JPEG decoder the ResNet-50 input pipeline uses, said by name, and its measured rate.

- ``backend_name(jpegs, augment_on_device, device_type)`` (pure): the decoder the trainer's
  settings choose: ``nvJPEG (torchcodec on cuda)`` with ``--augment-on-device`` on a GPU,
  ``torchcodec on the cpu`` with it on the CPU, ``PIL in the loading processes (CPU)`` without
  it, ``none (synthetic data)`` when there are no JPEGs. The trainer logs it at start
  (``training.resnet50``).
- ``probe(device, decoder=None, seconds=1.0)``: the backend ``check-cuda`` will report for a
  pod: decodes a tiny JPEG on ``device`` through ``training.device_augment`` (on CUDA:
  nvJPEG, which needs ``video`` in ``NVIDIA_DRIVER_CAPABILITIES``); when that works, the
  device decoder's rate on 224 px JPEGs in batches of ``BATCH``; when it does not, the CPU
  fallback (PIL, one core) and its rate, with the reason the device decoder failed. Returns a
  ``DecodeProbe``; never raises for a decoder that fails (that is the answer), blocks for
  about ``seconds`` per rate measured.
"""
from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass

PIL_CPU = "PIL in the loading processes (CPU)"
BATCH = 32
SIDE = 224


def backend_name(jpegs: bool, augment_on_device: bool, device_type: str) -> str:
    """The decoder the trainer's settings choose (module docstring). Pure."""
    if not jpegs:
        return "none (synthetic data)"
    if not augment_on_device:
        return PIL_CPU
    return "nvJPEG (torchcodec on cuda)" if device_type == "cuda" else f"torchcodec on the {device_type}"


@dataclass(frozen=True)
class DecodeProbe:
    """``backend`` the decoder a pod will use, ``rate`` its images per second at ``SIDE`` px,
    ``fallback_reason`` why the device decoder was not usable (empty when it was)."""

    backend: str
    rate: float
    fallback_reason: str = ""

    def line(self) -> str:
        why = f" (device decoder unusable: {self.fallback_reason})" if self.fallback_reason else ""
        return f"decode backend: {self.backend}, {self.rate:.0f} img/s on {SIDE} px JPEGs{why}"


def sample_jpeg(side: int = SIDE) -> bytes:
    """A ``side`` x ``side`` JPEG with detail in it (a gradient), quality 90."""
    from PIL import Image

    img = Image.new("RGB", (side, side))
    img.putdata([((x * 255) // side, (y * 255) // side, ((x ^ y) * 7) % 256) for y in range(side) for x in range(side)])
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def rate(decode_batch: Callable[[], int], seconds: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Images per second of ``decode_batch`` (decodes one batch, returns its size), run for at
    least ``seconds`` after one warm-up call."""
    decode_batch()
    start, done = clock(), 0
    while True:
        done += decode_batch()
        took = clock() - start
        if took >= seconds:
            return done / took


def probe(device, decoder=None, seconds: float = 1.0) -> DecodeProbe:
    """See the module docstring; ``device`` a ``torch.device``, ``decoder`` as
    ``training.device_augment.DeviceAugment`` takes it (tests pass one that fails)."""
    import torch

    from training.device_augment import DeviceAugment, DeviceError, cpu_decode

    data = torch.frombuffer(bytearray(sample_jpeg()), dtype=torch.uint8)
    augment = DeviceAugment(SIDE, device, decoder)
    try:
        augment.self_check()
    except DeviceError as exc:
        reason = str(exc).split(": ", 1)[-1]
        return DecodeProbe(PIL_CPU, rate(lambda: len([cpu_decode(data) for _ in range(4)]), seconds), reason)

    def device_batch() -> int:
        out = augment.decoder([data] * BATCH, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return len(out)

    name = backend_name(True, True, device.type)
    return DecodeProbe(name.replace("on cuda", f"on {device}") if device.type == "cuda" else name,
                       rate(device_batch, seconds))
