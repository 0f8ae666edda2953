"""``python -m training.resnet50`` / ``train-resnet50``: elastic ResNet-50 on horovod.torch.

Reads the tiny-imagenet layout as downloaded (``train/<wnid>/images/*.JPEG``,
``val/images`` + ``val/val_annotations.txt``) or any ImageFolder (``train/<class>/``
and optional ``val/<class>/``, or ``<class>/`` directly) from ``--data-dir``, or trains on
``--synthetic`` images; ``--augment-on-device`` decodes and augments on the training device
(``training.device_augment``). The model is torchvision's ResNet-50 with random initial weights
(nothing is downloaded) and as many outputs as the dataset has classes. The dataset is
scanned before Horovod starts: a missing or malformed one is one line on stderr, exit 2.
"""

from __future__ import annotations

import sys
from functools import partial

from training import options
from training.cli import train_command
from training.errors import ConfigError
from training.gpu_defaults import GIB, MIB

DEFAULTS = options.Defaults(
    prog="train-resnet50",
    description="Elastic ResNet-50 training on Horovod (horovodrun ... python -m training.resnet50).",
    epochs=90, batch_size=32, val_batch_size=32, lr=0.0125, momentum=0.9, weight_decay=1e-4,
    gpu_batch_size=256, lr_per_256=0.1,
    # ~41.7 MiB of saved activations per image at 224 px in 16-bit (measured), 3-4 GiB fixed:
    # 256 does not fit a 16 GB card (training.gpu_defaults)
    gpu_image_bytes=int(41.7 * MIB), gpu_fixed_bytes=4 * GIB,
    norm_weight_decay=0.0, label_smoothing=0.1,
    warmup_epochs=5.0, lr_milestones="30,60,80", synthetic_size=1280, image_size=224,
    num_classes=1000)


def make_task(args: options.TrainConfig):
    """The ResNet-50 ``Task``: datasets (scanned now) and the model factory."""
    found = None
    if args.data_dir:
        from training.imagefolder import scan

        found = scan(args.data_dir)  # checked before torch and Horovod are imported
    from torch.utils.data import Dataset

    from training.datasets import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        ImageListDataset,
        SyntheticDataset,
        uint8_transforms,
    )
    from training.decode_backend import backend_name
    from training.loop import Task
    from training.models import resnet50
    from training.trainer_base import log, use_cuda

    device_type = "cuda" if use_cuda(args) else "cpu"
    log(f"decode backend: {backend_name(found is not None, bool(args.augment_on_device), device_type)}")
    size, num_classes = args.image_size, args.num_classes
    if size is None or num_classes is None:  # parse sets both for this command's DEFAULTS
        raise ConfigError("train-resnet50 needs --image-size and --num-classes")
    shape = (3, size, size)
    augment_size = None
    normalize = None
    train: Dataset
    val: Dataset | None
    if found is not None and args.augment_on_device:
        from training.device_augment import JpegBytesDataset

        train = JpegBytesDataset(found.train)
        val = JpegBytesDataset(found.val) if found.val else None
        classes = len(found.classes)
        augment_size = size
    elif found is not None:
        # uint8 crops from the loading processes, normalised on the device
        train_tf, val_tf = uint8_transforms(size)
        normalize = (IMAGENET_MEAN, IMAGENET_STD)
        train = ImageListDataset(found.train, train_tf)
        val = ImageListDataset(found.val, val_tf) if found.val else None
        classes = len(found.classes)
    else:
        classes = num_classes
        train = SyntheticDataset(args.synthetic_size, shape, classes, seed=args.seed)
        val = SyntheticDataset(max(1, args.synthetic_size // 10), shape, classes, seed=args.seed + 1)
    return Task(name="resnet50", train_set=train, val_set=val,
                build_model=partial(resnet50, classes, args.zero_init_residual), channels_last=True,
                augment_size=augment_size, normalize=normalize)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, check the data, train; 0 when done, 2 on a bad flag or dataset."""
    return train_command(argv, DEFAULTS, make_task)


if __name__ == "__main__":
    sys.exit(main())
