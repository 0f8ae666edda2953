"""Decode and augment images on the training device (``--augment-on-device``).

At 64 px the CPU pipeline (PIL decode, RandomResizedCrop, flip, ToTensor, Normalize per
image in the loading processes) delivers a few hundred images/s per core while one GPU
trains ResNet-50 on tens of thousands (``scripts/bench-input-pipeline``). On this path the
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
is larger than the output, i.e. it anti-aliases a downscale). Images of different sizes in
one batch are processed in one call per distinct size.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import Dataset

from training.datasets import IMAGENET_MEAN, IMAGENET_STD
from training.errors import DatasetError

JPEG_MAGIC = b"\xff\xd8\xff"
SCALE = (0.08, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
ATTEMPTS = 10


def is_jpeg(data: bytes) -> bool:
    """Whether ``data`` starts like a JPEG file (SOI marker)."""
    return data[:3] == JPEG_MAGIC


class JpegBytesDataset(Dataset):
    """Images from ``(path, label)`` pairs, read but not decoded.

    ``__getitem__`` returns ``(image, label, path)``: for a JPEG file, its bytes as a 1-D uint8
    tensor (decoded later on the device); for any other format (PNG, BMP... in an
    ImageFolder) the image decoded here with PIL as a 3-D uint8 tensor (C, H, W) in RGB.
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
        if is_jpeg(data):
            return torch.frombuffer(bytearray(data), dtype=torch.uint8), target, path
        return _decode_other(path, data), target, path


def _decode_other(path: str, data: bytes) -> torch.Tensor:
    """A non-JPEG image as a (3, H, W) uint8 tensor, decoded with PIL."""
    import io

    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.asarray(img.convert("RGB"))
    except (OSError, UnidentifiedImageError) as exc:
        raise DatasetError(f"{path}: cannot decode image: {exc}") from exc
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


def collate_bytes(batch):
    """DataLoader ``collate_fn``: ``(list of image tensors, int64 labels, list of paths)``;
    the images differ in length (or size), so they are not stacked."""
    images = [item[0] for item in batch]
    labels = torch.stack([item[1] for item in batch])
    return images, labels, [item[2] for item in batch]


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


class DeviceAugment:
    """Decode and augment batches of ``JpegBytesDataset`` items on ``device``.

    ``train(images)`` and ``val(images)`` take the list a loader batch holds and return a
    float32 tensor ``(N, 3, size, size)`` on ``device``, normalised with the ImageNet mean
    and standard deviation. ``reseed(seed)`` restarts the random stream of the crops and
    flips. A JPEG that cannot be decoded raises ``DatasetError`` (``paths``, when given,
    names the file). Nothing here blocks on the device beyond what the decode does.
    """

    def __init__(self, size: int, device: torch.device):
        self.size, self.device = size, device
        self.generator = torch.Generator()
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255.0
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255.0

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def decode(self, images: list[torch.Tensor], paths: list[str] | None = None
               ) -> list[torch.Tensor]:
        """(3, H, W) uint8 images on the device: JPEG bytes decoded in one batched call
        (on CUDA by nvJPEG), already decoded images moved there."""
        from torchcodec.decoders import decode_jpeg

        jpeg = [i for i, t in enumerate(images) if t.ndim == 1]
        out: list[torch.Tensor | None] = [None] * len(images)
        if jpeg:
            data = [images[i] for i in jpeg]
            try:
                decoded = decode_jpeg(data, mode="RGB", device=self.device)
            except RuntimeError:
                self._find_bad_jpeg(data, [paths[i] for i in jpeg] if paths else None)
                raise
            for i, t in zip(jpeg, decoded, strict=True):
                out[i] = t
        for i, t in enumerate(images):
            if t.ndim != 1:
                out[i] = t.to(self.device, non_blocking=True)
        return [t for t in out if t is not None]

    def _find_bad_jpeg(self, data: list[torch.Tensor], paths: list[str] | None) -> None:
        """Raise ``DatasetError`` for the first of ``data`` that does not decode."""
        from torchcodec.decoders import decode_jpeg

        for k, t in enumerate(data):
            try:
                decode_jpeg(t, mode="RGB", device=self.device)
            except RuntimeError as exc:
                name = paths[k] if paths else f"image {k} of the batch"
                raise DatasetError(f"{name}: cannot decode image: {exc}".splitlines()[0]) from exc

    def train(self, images: list[torch.Tensor], paths: list[str] | None = None) -> torch.Tensor:
        """Random resized crops, flipped with probability 1/2, normalised."""
        decoded = self.decode(images, paths)
        h, w = _sizes(decoded)
        boxes = crop_boxes(self.generator, h, w)
        flips = torch.rand(len(decoded), generator=self.generator) < 0.5
        out = self._resample(decoded, boxes)
        flips = flips.to(self.device, non_blocking=True)[:, None, None, None]
        out = torch.where(flips, out.flip(-1), out)
        return out.sub_(self.mean).div_(self.std)

    def val(self, images: list[torch.Tensor], paths: list[str] | None = None) -> torch.Tensor:
        """The resize + central crop of validation, normalised."""
        decoded = self.decode(images, paths)
        h, w = _sizes(decoded)
        return self._resample(decoded, center_boxes(h, w, self.size)).sub_(self.mean).div_(self.std)

    def _resample(self, images: list[torch.Tensor], boxes: torch.Tensor) -> torch.Tensor:
        """Each image's box resampled to ``size`` x ``size`` (float32, 0-255): one
        ``roi_align`` per distinct image size."""
        from torchvision.ops import roi_align

        out = torch.empty((len(images), 3, self.size, self.size), dtype=torch.float32,
                          device=self.device)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, t in enumerate(images):
            groups.setdefault((t.shape[1], t.shape[2]), []).append(i)
        for members in groups.values():
            stack = torch.stack([images[i] for i in members]).float()
            rois = torch.cat([torch.arange(len(members), dtype=torch.float64)[:, None],
                              boxes[members]], dim=1).float().to(self.device, non_blocking=True)
            resampled = roi_align(stack, rois, (self.size, self.size), spatial_scale=1.0,
                                  sampling_ratio=-1, aligned=True)
            index = torch.tensor(members, device=self.device)
            out.index_copy_(0, index, resampled)
        return out


def _sizes(images: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Heights and widths of (C, H, W) images as int64 tensors on the CPU."""
    return (torch.tensor([t.shape[1] for t in images], dtype=torch.int64),
            torch.tensor([t.shape[2] for t in images], dtype=torch.int64))
