"""PyTorch datasets over what ``idx`` and ``imagefolder`` found, and generated data.

Each dataset returns ``(image tensor, label)`` and is indexable by the sample indices the
sampler hands out. Images are decoded lazily (per sample), so building a dataset is cheap
and only ``scan``/``load_mnist`` touch the disk up front.

Orientation: one rule on every decode path. An image's EXIF orientation (tag 0x0112) is
applied, as torchcodec does on the CPU and on CUDA (``--augment-on-device``), so PIL (the
loading processes' path and the device path's CPU fallback) applies it too (``oriented``):
the same file trains upright on every path, crops drawn on the upright size.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from training.errors import DatasetError
from training.idx import Split

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class MnistDataset(Dataset):
    """An MNIST split as normalised float images (1, 28, 28) and int64 labels."""

    def __init__(self, split: Split):
        self.images = split.images
        self.labels = split.labels

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, i: int):
        x = self.images[i].to(torch.float32).div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD)
        return x.unsqueeze(0), self.labels[i]


class SyntheticDataset(Dataset):
    """``size`` generated images of ``shape``, cheap enough not to slow a benchmark down.

    A pool of ``pool`` random images (seeded by ``seed``) is drawn once per process; sample
    ``i`` is pool image ``i % pool`` plus a faint offset that depends on its label
    ``i % classes``, so a model can learn something and accuracy moves in a smoke run.
    """

    def __init__(self, size: int, shape: tuple[int, ...], classes: int, seed: int = 0,
                 pool: int = 64):
        self.size, self.shape, self.classes, self.seed = size, shape, classes, seed
        self.pool_size = max(1, min(pool, size))
        self._pool: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        if self._pool is None:
            g = torch.Generator().manual_seed(self.seed)
            self._pool = torch.randn((self.pool_size, *self.shape), generator=g)
        label = int(i) % self.classes
        x = self._pool[int(i) % self.pool_size] + (label / self.classes - 0.5)
        return x, torch.tensor(label, dtype=torch.int64)


EXIF_ORIENTATION = 0x0112
# EXIF orientation -> the PIL transpose that makes the image upright (PIL's exif_transpose)
_UPRIGHT = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
            6: "ROTATE_270", 7: "TRANSVERSE", 8: "ROTATE_90"}
SWAPS_SIDES = frozenset({5, 6, 7, 8})


def exif_orientation(img) -> int:
    """The EXIF orientation of an open PIL image, 1 (as stored) when it has none or a bad one."""
    try:
        value = img.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # a malformed EXIF block: decoders ignore it, so do we
        return 1
    return value if isinstance(value, int) and value in _UPRIGHT else 1


def oriented(img, orientation: int):
    """``img`` turned upright for EXIF ``orientation`` (itself for 1)."""
    from PIL import Image

    method = _UPRIGHT.get(orientation)
    return img.transpose(getattr(Image.Transpose, method)) if method else img


def upright_rgb(img):
    """An open PIL image as upright RGB (``exif_orientation`` applied)."""
    return oriented(img.convert("RGB"), exif_orientation(img))


class ImageListDataset(Dataset):
    """Images from ``(path, label)`` pairs, decoded with PIL and passed through ``transform``.

    A transform with a ``load(path)`` method (``CropToUint8``) opens the file itself (to
    decode a large JPEG at a reduced scale); any other is called on the RGB image."""

    def __init__(self, samples, transform):
        self.samples = tuple(samples)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        from PIL import Image, UnidentifiedImageError

        path, label = self.samples[i]
        try:
            if hasattr(self.transform, "load"):
                x = self.transform.load(path)
            else:
                with Image.open(path) as img:
                    x = self.transform(upright_rgb(img))
        except (OSError, UnidentifiedImageError) as exc:
            raise DatasetError(f"{path}: cannot decode image: {exc}") from exc
        return x, torch.tensor(label, dtype=torch.int64)


def image_transforms(size: int):
    """(train, val) torchvision transforms for square inputs of ``size`` pixels, to normalised
    float tensors (the reference the uint8 pipeline, ``uint8_transforms``, is checked against)."""
    from torchvision import transforms as T

    norm = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    train = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    val = T.Compose([T.Resize(int(round(size * 256 / 224))), T.CenterCrop(size), T.ToTensor(), norm])
    return train, val


class CropToUint8:
    """Open, crop and resize one image to a ``size`` x ``size`` uint8 tensor (3, H, W), left
    unnormalised: the training process normalises whole batches on its device
    (``Normalizer``), so a loading process sends a quarter of the bytes and does no float work.

    ``train``: torchvision's ``RandomResizedCrop(size)`` then ``RandomHorizontalFlip()``,
    drawing from torch's random stream in the same order and on the same (original) image
    size; ``val``: ``Resize(round(size * 256 / 224))`` then ``CenterCrop(size)``. Without a
    reduced decode the pixels are those of the torchvision transforms (``image_transforms``).

    Reduced decode: when the region to resample is at least twice the output in both
    directions, a JPEG is decoded at 1/2, 1/4 or 1/8 scale (``Image.draft``: the decoder skips
    the DCT coefficients it does not need) to the smallest scale that still leaves the region
    at least ``size`` pixels across. The crop box is computed on the original size first and
    mapped onto the reduced image (as fractional coordinates: ``Image.resize``'s ``box``), so
    the geometry, and the random stream, do not depend on whether the decode was reduced.
    ``draft=False`` turns it off (the reference in tests)."""

    def __init__(self, size: int, train: bool, draft: bool = True):
        self.size, self.train, self.draft = size, train, draft
        self.resize_to = int(round(size * 256 / 224))

    def box(self, width: int, height: int) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) in the original image of the region that becomes the
        output (drawn from torch's random stream in training)."""
        if self.train:
            from torchvision.transforms import RandomResizedCrop

            top, left, h, w = RandomResizedCrop.get_params(
                torch.empty(0, height, width), [0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0])
            return left, top, left + w, top + h
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.resize_to, int(self.resize_to * long / short)
        new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
        top = int(round((new_h - self.size) / 2.0))
        left = int(round((new_w - self.size) / 2.0))
        # the central crop of the resized image, in original coordinates (fractional)
        sx, sy = width / new_w, height / new_h
        return (left * sx, top * sy, (left + self.size) * sx, (top + self.size) * sy)

    def load(self, path) -> torch.Tensor:
        from PIL import Image

        with Image.open(path) as img:
            orientation = exif_orientation(img)
            width, height = img.size  # upright (the crop is drawn on the upright image)
            if orientation in SWAPS_SIDES:
                width, height = height, width
            left, top, right, bottom = self.box(width, height)
            flip = self.train and bool(torch.rand(1) < 0.5)
            if self.draft and img.format == "JPEG":
                bw, bh = right - left, bottom - top
                if bw >= 2 * self.size and bh >= 2 * self.size:
                    want = (-(-width * self.size // int(bw)), -(-height * self.size // int(bh)))
                    img.draft("RGB", want[::-1] if orientation in SWAPS_SIDES else want)
            img = oriented(img.convert("RGB"), orientation)
            out = self.resample(img, (width, height), (left, top, right, bottom))
        if flip:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return pil_to_uint8(out)

    def resample(self, img, original: tuple[int, int], box):
        """``img`` (maybe decoded at a reduced scale) resampled from ``box`` (original
        coordinates) to the output size."""
        from PIL import Image

        size = (self.size, self.size)
        if img.size == original:
            if self.train:  # as torchvision: crop, then resize the crop
                return img.crop(box).resize(size, Image.Resampling.BILINEAR)
            from torchvision.transforms import functional as F

            return F.center_crop(F.resize(img, self.resize_to), [self.size, self.size])
        # the decoder's scale is 1/2, 1/4 or 1/8, its output rounded up to whole pixels
        f = 1.0 / max(1, round(original[0] / img.size[0]))
        left, top, right, bottom = box
        return img.resize(size, Image.Resampling.BILINEAR,
                          box=(left * f, top * f, min(right * f, img.size[0]), min(bottom * f, img.size[1])))


def pil_to_uint8(img) -> torch.Tensor:
    """An RGB PIL image as a uint8 tensor (3, H, W) (torchvision's ``pil_to_tensor``)."""
    from torchvision.transforms.functional import pil_to_tensor

    return pil_to_tensor(img)


def uint8_transforms(size: int, draft: bool = True) -> tuple[CropToUint8, CropToUint8]:
    """(train, val) uint8 transforms for ``ImageListDataset``: the crops of
    ``image_transforms``, normalised later on the device by ``Normalizer``."""
    return CropToUint8(size, train=True, draft=draft), CropToUint8(size, train=False, draft=draft)


class Normalizer:
    """Batches of uint8 images (N, C, H, W) to normalised floats on the training device, in
    one fused elementwise step: ``x * (1 / (255 std)) - mean / std`` (one ``addcmul`` that
    reads uint8 and writes ``dtype``, e.g. the mixed-precision type, into an output allocated
    channels_last when ``channels_last``). The result equals ``ToTensor`` + ``Normalize`` on
    the CPU within float rounding."""

    def __init__(self, mean, std, device: torch.device, dtype: torch.dtype = torch.float32,
                 channels_last: bool = False):
        m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.scale = (1.0 / (255.0 * s)).to(device)
        self.shift = (-m / s).to(device)
        self.device, self.dtype, self.channels_last = device, dtype, channels_last

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, non_blocking=True)
        fmt = torch.channels_last if self.channels_last and x.dim() == 4 else torch.contiguous_format
        out = torch.empty(x.shape, dtype=self.dtype, device=self.device, memory_format=fmt)
        return torch.addcmul(self.shift, x, self.scale, out=out)
