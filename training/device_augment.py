"""Decode and augment images on the training device (``--augment-on-device``).

At 64 px the CPU pipeline (PIL decode, RandomResizedCrop, flip, ToTensor, Normalize per
image in the loading processes) delivers a few hundred images/s per core while one GPU
trains ResNet-50 on tens of thousands (``scripts/benchmarks/bench-input-pipeline``). On this path the
loading processes only read each file's bytes (``JpegBytesDataset``: no decode, so a core
reads thousands of files/s); the training process decodes a whole batch at once
(``torchcodec.decoders.decode_jpeg`` on a list, with ``device=`` on CUDA: one nvJPEG call;
TorchCodec supersedes ``torchvision.io``'s decoders, deprecated in torchvision 0.29) and crops,
resizes, flips and normalises it as a few batched tensor operations on the device
(``DeviceAugment``). On the CPU (``--debug-gpu-path`` or no GPU) the same calls run on the
CPU: only the device differs.

The samples, their order and the accounting are the sampler's as on the CPU path; only where
the pixels are made differs. The random crops and flips come from a ``torch.Generator`` of
this module seeded per rank (``training.seeding.stream_seed``), like the loading processes'
streams on the CPU path.

Geometry, the same as ``training.datasets.image_transforms``:

- training: torchvision's ``RandomResizedCrop`` parameters (scale 0.08-1, ratio 3/4-4/3,
  ten attempts, then the central crop), drawn for the whole batch at once, then a
  horizontal flip with probability 1/2;
- validation: the resize of the shorter side to ``size * 256 / 224`` followed by the
  central ``size`` crop, taken as the equivalent box in the original image.

Each box is resampled to ``size`` x ``size`` by ``torchvision.ops.roi_align`` (bilinear,
``aligned=True``; adaptive sampling averages several points per output pixel when the box
is larger than the output, i.e. it anti-aliases a downscale), one call for the whole batch
padded to its largest image (edges replicated, so the result is the same as per image); when
that padding would more than double the pixels (``PAD_LIMIT``: a 3000 px photo among ~500 px
ones, common in ImageNet batches), one call per size bucket (``pad_buckets``: a few buckets,
each within the limit).

Transfer: ``collate_bytes`` packs a batch into one uint8 tensor with offsets
(``PackedImages``), so a batch crosses from a loading process as a handful of shared-memory
tensors instead of one per image; it is not pinned (the decoder reads host memory).

Failures: ``DeviceAugment.self_check`` decodes a tiny JPEG on the device at start-up and
raises ``DeviceError`` naming the cause (no torchcodec, a torchcodec without CUDA, nvJPEG
that does not start). In training, an image the device decoder rejects (nvJPEG refuses
CMYK JPEGs, ImageNet holds ~22) is decoded on the CPU with PIL instead and counted
(``fallbacks``, reported as ``decode_fallbacks`` in the metrics); ``DatasetError`` only when
PIL cannot decode it either.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.utils.data import Dataset

from training.datasets import IMAGENET_MEAN, IMAGENET_STD, upright_rgb
from training.errors import DatasetError, DeviceError
from training.jpeg_header import needs_cpu_decode

JPEG_MAGIC = b"\xff\xd8\xff"
SCALE = (0.08, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
ATTEMPTS = 10
PAD_LIMIT = 2.0  # one roi_align per bucket of images whose padding at most doubles their pixels


def is_jpeg(data: bytes) -> bool:
    """Whether ``data`` starts like a JPEG file (SOI marker)."""
    return data[:3] == JPEG_MAGIC


class JpegBytesDataset(Dataset):
    """Images from ``(path, label)`` pairs, read but not decoded.

    ``__getitem__`` returns ``(image, label, path)``: for a JPEG file, its bytes as a 1-D uint8
    tensor (decoded later on the device); for any other format (PNG, BMP... in an
    ImageFolder), and for a JPEG whose header says CMYK, YCCK or Adobe RGB
    (``training.jpeg_header``: nvJPEG's colour conversion expects YCbCr or grayscale and may
    return wrong colours instead of an error; ImageNet holds ~22 CMYK JPEGs), the image
    decoded here with PIL as a 3-D uint8 tensor (C, H, W) in RGB. The header is read here,
    in the loading processes, not in the training process that feeds the GPU.
    An unreadable file raises ``DatasetError`` naming it.
    """

    def __init__(self, samples):
        self.samples = tuple(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise DatasetError(f"{path}: cannot read: {exc.strerror}") from exc
        target = torch.tensor(label, dtype=torch.int64)
        if is_jpeg(data) and not needs_cpu_decode(data):
            return torch.frombuffer(bytearray(data), dtype=torch.uint8), target, path
        return _decode_other(path, data), target, path


def _decode_other(path: str, data: bytes) -> torch.Tensor:
    """A non-JPEG (or CMYK JPEG) image as a (3, H, W) uint8 tensor, decoded with PIL."""
    import io

    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.asarray(upright_rgb(img))
    except (OSError, UnidentifiedImageError) as exc:
        raise DatasetError(f"{path}: cannot decode image: {exc}") from exc
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


class PackedImages(NamedTuple):
    """A batch of ``JpegBytesDataset`` images in three tensors: ``data`` (uint8, every item
    back to back), ``offsets`` (int64, N + 1: item ``i`` is ``data[offsets[i]:offsets[i+1]]``)
    and ``shapes`` (int64, N x 3: ``(3, H, W)`` of an item decoded in the loading process,
    stored as its pixels; zeros for JPEG bytes)."""

    data: torch.Tensor
    offsets: torch.Tensor
    shapes: torch.Tensor

    @property
    def num_images(self) -> int:
        """The number of images (``len`` is the tuple's: three tensors)."""
        return int(self.offsets.shape[0]) - 1

    def unpack(self) -> list[torch.Tensor]:
        """The items as views of ``data``: 1-D JPEG bytes, or (3, H, W) uint8 pixels."""
        bounds = self.offsets.tolist()
        out = []
        for i, shape in enumerate(self.shapes.tolist()):
            item = self.data[bounds[i]:bounds[i + 1]]
            out.append(item.view(shape) if shape[0] else item)
        return out


def pack(images: list[torch.Tensor]) -> PackedImages:
    """``images`` (1-D JPEG bytes or (3, H, W) uint8 pixels) as one ``PackedImages``."""
    flat = [t.reshape(-1) for t in images]
    sizes = torch.tensor([0] + [t.numel() for t in flat], dtype=torch.int64)
    shapes = torch.tensor([list(t.shape) if t.ndim == 3 else [0, 0, 0] for t in images],
                          dtype=torch.int64).reshape(len(images), 3)
    data = torch.cat(flat) if flat else torch.empty(0, dtype=torch.uint8)
    return PackedImages(data, torch.cumsum(sizes, 0), shapes)


def collate_bytes(batch):
    """DataLoader ``collate_fn``: ``(PackedImages, int64 labels, list of paths)``: the
    images differ in length (or size), so they are packed with offsets, not stacked."""
    labels = torch.stack([item[1] for item in batch])
    return pack([item[0] for item in batch]), labels, [item[2] for item in batch]


def tiny_jpeg() -> tuple[bytes, tuple[int, int, int]]:
    """A 16 x 16 JPEG of one colour and that colour, for the device self-check."""
    import io

    from PIL import Image

    colour = (200, 40, 120)
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(buf, "JPEG", quality=95)
    return buf.getvalue(), colour


def torchcodec_decoder(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Decode JPEG bytes (1-D uint8 tensors on the CPU) to (3, H, W) uint8 RGB on ``device``
    in one ``torchcodec.decoders.decode_jpeg`` call (on CUDA: one nvJPEG batch)."""
    from torchcodec.decoders import decode_jpeg

    out = decode_jpeg(list(data), mode="RGB", device=device)
    return out if isinstance(out, list) else [out]


def cpu_decode(data: torch.Tensor) -> torch.Tensor:
    """JPEG bytes decoded with PIL (any JPEG it reads, CMYK included) as (3, H, W) uint8 RGB,
    its EXIF orientation applied as torchcodec applies it; ``OSError`` or
    ``UnidentifiedImageError`` when it cannot."""
    import io

    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data.numpy().tobytes())) as img:
        rgb = np.asarray(upright_rgb(img))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


def crop_boxes(generator: torch.Generator, heights: torch.Tensor, widths: torch.Tensor
               ) -> torch.Tensor:
    """RandomResizedCrop boxes ``(x1, y1, x2, y2)`` in pixels (float64), one per image of
    ``heights`` x ``widths``, drawn from ``generator`` for the whole batch at once.

    Like ``torchvision.transforms.RandomResizedCrop.get_params``: up to ten attempts of an
    area fraction in ``SCALE`` and a log-uniform aspect ratio in ``RATIO``; the first that
    fits is placed uniformly at an integer offset; none fits: the central crop clamped to
    the ratio range."""
    n = heights.shape[0]
    h_img, w_img = heights.double(), widths.double()
    area = (h_img * w_img)[:, None]
    draws = torch.rand((n, ATTEMPTS, 4), generator=generator, dtype=torch.float64)
    target = area * (SCALE[0] + (SCALE[1] - SCALE[0]) * draws[..., 0])
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    aspect = torch.exp(log_lo + (log_hi - log_lo) * draws[..., 1])
    w = torch.round(torch.sqrt(target * aspect))
    h = torch.round(torch.sqrt(target / aspect))
    fits = (w > 0) & (h > 0) & (w <= w_img[:, None]) & (h <= h_img[:, None])
    first = torch.argmax(fits.to(torch.int8), dim=1)  # first attempt that fits (0 if none)
    pick = first[:, None]
    w, h = w.gather(1, pick)[:, 0], h.gather(1, pick)[:, 0]
    top = torch.floor(draws[..., 2].gather(1, pick)[:, 0] * (h_img - h + 1))
    left = torch.floor(draws[..., 3].gather(1, pick)[:, 0] * (w_img - w + 1))
    # fallback: the central crop, clamped to the ratio range
    in_ratio = w_img / h_img
    fw = torch.where(in_ratio > RATIO[1], torch.round(h_img * RATIO[1]), w_img)
    fh = torch.where(in_ratio < RATIO[0], torch.round(w_img / RATIO[0]), h_img)
    ftop, fleft = torch.div(h_img - fh, 2, rounding_mode="floor"), torch.div(w_img - fw, 2, rounding_mode="floor")
    ok = fits.any(dim=1)
    w, h = torch.where(ok, w, fw), torch.where(ok, h, fh)
    top, left = torch.where(ok, top, ftop), torch.where(ok, left, fleft)
    return torch.stack([left, top, left + w, top + h], dim=1)


def center_boxes(heights: torch.Tensor, widths: torch.Tensor, size: int) -> torch.Tensor:
    """Boxes ``(x1, y1, x2, y2)`` (float64) equal to ``Resize(round(size * 256 / 224))`` of
    the shorter side followed by ``CenterCrop(size)``, in the original image's pixels."""
    h_img, w_img = heights.double(), widths.double()
    short = int(round(size * 256 / 224))
    scale = short / torch.minimum(h_img, w_img)  # resized pixels per original pixel
    # the resized size as torchvision computes it (the long side truncated), then the
    # central crop's offset in resized pixels, as CenterCrop rounds it
    rh = torch.where(h_img <= w_img, torch.full_like(h_img, short), torch.floor(h_img * scale))
    rw = torch.where(w_img <= h_img, torch.full_like(w_img, short), torch.floor(w_img * scale))
    top = torch.round((rh - size) / 2) / (rh / h_img)
    left = torch.round((rw - size) / 2) / (rw / w_img)
    return torch.stack([left, top, left + size / (rw / w_img), top + size / (rh / h_img)], dim=1)


Decoder = Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]]


class DeviceAugment:
    """Decode and augment batches of ``JpegBytesDataset`` items on ``device``.

    ``train(images)`` and ``val(images)`` take the images a loader batch holds
    (``PackedImages``, or a list of tensors) and return a float32 tensor ``(N, 3, size, size)``
    on ``device``, normalised with the ImageNet mean and standard deviation. ``reseed(seed)``
    restarts the random stream of the crops and flips. ``decoder`` decodes a list of JPEGs
    on the device (default: ``torchcodec_decoder``; tests pass one that fails). A JPEG the
    decoder rejects is decoded on the CPU and counted in ``fallbacks``; one that PIL cannot
    decode either raises ``DatasetError`` (``paths``, when given, names the file).
    ``self_check()`` raises ``DeviceError`` when the decoder cannot decode on ``device`` at
    all. Nothing here blocks on the device beyond what the decode does.
    """

    def __init__(self, size: int, device: torch.device, decoder: Decoder | None = None):
        self.size, self.device = size, device
        self.decoder: Decoder = decoder or torchcodec_decoder
        self.fallbacks = 0  # images decoded on the CPU because the device decoder refused them
        self._lock = threading.Lock()  # decode may run in a prefetch thread (training.prefetch)
        self.generator = torch.Generator()
        self._norm: tuple[torch.Tensor, torch.Tensor] | None = None  # made at first use

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (0-255) normalised in place with the ImageNet mean and deviation."""
        if self._norm is None:
            self._norm = (torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1) * 255.0,
                          torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1) * 255.0)
        mean, std = self._norm
        return x.sub_(mean).div_(std)

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def self_check(self) -> None:
        """Decode a tiny JPEG on the device and check its colour; ``DeviceError`` naming the
        cause when that fails (blocks until the decode is done)."""
        data, colour = tiny_jpeg()
        where = f"--augment-on-device cannot decode JPEGs on {self.device}"
        try:
            out = self.decoder([torch.frombuffer(bytearray(data), dtype=torch.uint8)], self.device)
            got = out[0].float().mean(dim=(1, 2)).cpu().tolist()
        except ImportError as exc:
            raise DeviceError(f"{where}: torchcodec is not installed ({exc})") from exc
        except Exception as exc:  # whatever the decoder raises, say so in one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            hint = (" (a torchcodec built without CUDA, or nvJPEG failed to start)"
                    if self.device.type == "cuda" else "")
            raise DeviceError(f"{where}: {type(exc).__name__}: {first}{hint}; with "
                              "--no-augment-on-device the loading processes decode on the CPU"
                              ) from exc
        if len(out[0].shape) != 3 or tuple(out[0].shape) != (3, 16, 16) or any(
                abs(g - c) > 8 for g, c in zip(got, colour, strict=True)):
            raise DeviceError(f"{where}: a 16x16 test JPEG of colour {colour} decoded as "
                              f"shape {tuple(out[0].shape)}, mean colour {[round(g) for g in got]}")

    def take_fallbacks(self) -> int:
        """The CPU fallbacks counted since the last call (and reset the count)."""
        with self._lock:
            n, self.fallbacks = self.fallbacks, 0
        return n

    def decode(self, images: PackedImages | list[torch.Tensor], paths: list[str] | None = None
               ) -> list[torch.Tensor]:
        """(3, H, W) uint8 images on the device: JPEG bytes decoded in one batched call
        (on CUDA by nvJPEG), already decoded images moved there. When the batched call fails,
        each image is decoded alone; what the device decoder rejects is decoded by PIL on
        the CPU (counted in ``fallbacks``); ``DatasetError`` when PIL fails too."""
        if isinstance(images, PackedImages):
            images = images.unpack()
        jpeg = [i for i, t in enumerate(images) if t.ndim == 1]
        out: list[torch.Tensor | None] = [None] * len(images)
        if jpeg:
            data = [images[i] for i in jpeg]
            try:
                decoded = self.decoder(data, self.device)
            except (RuntimeError, ValueError):
                decoded = [self._decode_one(t, paths[i] if paths else f"image {i} of the batch")
                           for i, t in zip(jpeg, data, strict=True)]
            for i, t in zip(jpeg, decoded, strict=True):
                out[i] = t
        for i, t in enumerate(images):
            if t.ndim != 1:
                out[i] = t.to(self.device, non_blocking=True)
        return [t for t in out if t is not None]

    def _decode_one(self, data: torch.Tensor, name: str) -> torch.Tensor:
        """One JPEG on the device, else with PIL on the CPU (counted), else ``DatasetError``."""
        from PIL import UnidentifiedImageError

        try:
            return self.decoder([data], self.device)[0]
        except (RuntimeError, ValueError) as exc:
            device_error = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        try:
            image = cpu_decode(data)
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            raise DatasetError(f"{name}: cannot decode image: {exc} (on {self.device}: "
                               f"{device_error})".splitlines()[0]) from exc
        with self._lock:
            self.fallbacks += 1
        return image.to(self.device, non_blocking=True)

    def train(self, images: PackedImages | list[torch.Tensor], paths: list[str] | None = None
              ) -> torch.Tensor:
        """Random resized crops, flipped with probability 1/2, normalised; channels_last."""
        decoded = self.decode(images, paths)
        h, w = _sizes(decoded)
        boxes = crop_boxes(self.generator, h, w)
        flips = torch.rand(len(decoded), generator=self.generator) < 0.5
        out = self._resample(decoded, boxes)
        flipped = flips.nonzero()[:, 0]
        if flipped.numel():  # only the flipped images are copied, in place (channels_last kept)
            flipped = flipped.to(self.device, non_blocking=True)
            out[flipped] = out[flipped].flip(-1)
        return self.normalise(out)

    def val(self, images: PackedImages | list[torch.Tensor], paths: list[str] | None = None
            ) -> torch.Tensor:
        """The resize + central crop of validation, normalised; channels_last."""
        decoded = self.decode(images, paths)
        h, w = _sizes(decoded)
        return self.normalise(self._resample(decoded, center_boxes(h, w, self.size)))

    def _resample(self, images: list[torch.Tensor], boxes: torch.Tensor) -> torch.Tensor:
        """Each image's box resampled to ``size`` x ``size`` (float32, 0-255, channels_last:
        the layout the model wants).

        One ``roi_align`` per size bucket (``pad_buckets``): usually the whole batch, else a
        few buckets (a very large image among small ones, common on ImageNet), each placed
        back at its images' positions."""
        hs = [int(t.shape[1]) for t in images]
        ws = [int(t.shape[2]) for t in images]
        buckets = pad_buckets(hs, ws, PAD_LIMIT)
        if len(buckets) == 1:
            return self._resample_padded(images, boxes)
        out = torch.empty((len(images), 3, self.size, self.size), dtype=torch.float32,
                          device=self.device, memory_format=torch.channels_last)
        for members in buckets:
            resampled = self._resample_padded([images[i] for i in members], boxes[members])
            out.index_copy_(0, torch.tensor(members, device=self.device), resampled)
        return out

    def _resample_padded(self, images: list[torch.Tensor], boxes: torch.Tensor) -> torch.Tensor:
        """``_resample`` in one ``roi_align``: the images padded to the largest height and
        width, each padded with copies of its last row and column (``roi_align`` clamps a
        sample point past the last pixel to the tensor's edge, so this gives the value an
        image of its own size gives: the same result as one call per image), made by one
        gather."""
        from torchvision.ops import roi_align

        hs = [int(t.shape[1]) for t in images]
        ws = [int(t.shape[2]) for t in images]
        n, height, width = len(images), max(hs), max(ws)
        if len(set(hs)) == 1 and len(set(ws)) == 1:  # one size (tiny-imagenet): no padding
            stack = torch.stack(images).float()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch.nested's prototype warning
                padded = torch.nested.to_padded_tensor(torch.nested.nested_tensor(images), 0)
            dev = padded.device
            last_row = torch.tensor(hs, device=dev)[:, None] - 1
            last_col = torch.tensor(ws, device=dev)[:, None] - 1
            rows = torch.minimum(torch.arange(height, device=dev)[None, :], last_row)  # (N, H)
            cols = torch.minimum(torch.arange(width, device=dev)[None, :], last_col)   # (N, W)
            which = torch.arange(n, device=dev)[:, None, None]
            edged = padded[which, :, rows[:, :, None], cols[:, None, :]]  # (N, H, W, 3)
            stack = edged.permute(0, 3, 1, 2).float()
        rois = torch.cat([torch.arange(n, dtype=torch.float64)[:, None], boxes], dim=1)
        resampled = roi_align(stack, rois.float().to(self.device, non_blocking=True),
                              (self.size, self.size), spatial_scale=1.0, sampling_ratio=-1,
                              aligned=True)
        return resampled.contiguous(memory_format=torch.channels_last)


def pad_buckets(heights: list[int], widths: list[int], limit: float) -> list[list[int]]:
    """A partition of images ``heights[i]`` x ``widths[i]`` into buckets (lists of indices,
    each in ascending order) such that each bucket padded to its own largest height and width
    holds at most ``limit`` times its images' pixels (``limit`` >= 1).

    The whole batch when it fits (one bucket); else first fit over the images sorted by area,
    smallest first: each joins the first bucket it keeps within the limit, or opens a new
    one. Images of one area but either orientation (500x375 and 375x500: padded to 500x500,
    1.33 times their pixels) share a bucket; the small ones fill the first buckets before a
    large one comes, so a very large image (ImageNet: a 3000x2000 photo in a batch of
    ~500x375) never pads a small one to its size, and the few large ones share a bucket or
    two of their own."""
    n = len(heights)
    if n == 0:
        return []
    if n * max(heights) * max(widths) <= limit * sum(h * w for h, w in zip(heights, widths, strict=True)):
        return [list(range(n))]
    order = sorted(range(n), key=lambda i: (heights[i] * widths[i], i))
    buckets: list[list[int]] = []
    shape: list[tuple[int, int, int]] = []  # per bucket: max height, max width, pixels
    for i in order:
        h, w = heights[i], widths[i]
        for b, (bh, bw, pixels) in enumerate(shape):
            nh, nw = max(bh, h), max(bw, w)
            if (len(buckets[b]) + 1) * nh * nw <= limit * (pixels + h * w):
                buckets[b].append(i)
                shape[b] = (nh, nw, pixels + h * w)
                break
        else:
            buckets.append([i])
            shape.append((h, w, h * w))
    return [sorted(b) for b in buckets]


def _sizes(images: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Heights and widths of (C, H, W) images as int64 tensors on the CPU."""
    return (torch.tensor([t.shape[1] for t in images], dtype=torch.int64),
            torch.tensor([t.shape[2] for t in images], dtype=torch.int64))
