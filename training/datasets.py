"""PyTorch datasets over what ``idx`` and ``imagefolder`` found, and generated data.

Each dataset returns ``(image tensor, label)`` and is indexable by the sample indices the
sampler hands out. Images are decoded lazily (per sample), so building a dataset is cheap
and only ``scan``/``load_mnist`` touch the disk up front.
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


class ImageListDataset(Dataset):
    """Images from ``(path, label)`` pairs, decoded with PIL and passed through ``transform``."""

    def __init__(self, samples, transform):
        self.samples = tuple(samples)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        from PIL import Image, UnidentifiedImageError

        path, label = self.samples[i]
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
        except (OSError, UnidentifiedImageError) as exc:
            raise DatasetError(f"{path}: cannot decode image: {exc}") from exc
        return self.transform(img), torch.tensor(label, dtype=torch.int64)


def image_transforms(size: int):
    """(train, val) torchvision transforms for square inputs of ``size`` pixels."""
    from torchvision import transforms as T

    norm = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    train = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    val = T.Compose([T.Resize(int(round(size * 256 / 224))), T.CenterCrop(size), T.ToTensor(), norm])
    return train, val
