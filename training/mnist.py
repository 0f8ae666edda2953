"""``python -m training.mnist`` / ``train-mnist``: elastic MNIST on horovod.torch.

Reads MNIST's four raw IDX files (``train-images-idx3-ubyte`` etc., optionally ``.gz``) from
``--data-dir`` (or its ``MNIST/raw``), or trains on ``--synthetic`` 28x28 digits. The dataset
is checked before Horovod starts, so a missing or malformed file is one line on stderr and
exit code 2. See ``training.loop`` for the elastic behaviour and ``training.options`` for flags.
"""

from __future__ import annotations

import sys

from training import options
from training.cli import train_command

DEFAULTS = options.Defaults(
    prog="train-mnist", description="Elastic MNIST training on Horovod (horovodrun ... python -m training.mnist).",
    epochs=10, batch_size=64, val_batch_size=1000, lr=0.01, momentum=0.5, weight_decay=0.0,
    warmup_epochs=0.0, lr_milestones="", synthetic_size=6000)


def make_task(args: options.TrainConfig):
    """The MNIST ``Task``: datasets (checked now) and the model factory."""
    if args.data_dir:
        from training.idx import load_mnist

        splits = load_mnist(args.data_dir)  # checked before torch and Horovod are imported
    from torch.utils.data import Dataset

    from training.datasets import MnistDataset, SyntheticDataset
    from training.loop import Task
    from training.models import MnistNet

    train: Dataset
    val: Dataset
    if args.data_dir:
        train, val = MnistDataset(splits["train"]), MnistDataset(splits["test"])
    else:
        train = SyntheticDataset(args.synthetic_size, (1, 28, 28), 10, seed=args.seed)
        val = SyntheticDataset(max(1, args.synthetic_size // 6), (1, 28, 28), 10, seed=args.seed + 1)
    return Task(name="mnist", train_set=train, val_set=val, build_model=MnistNet)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, check the data, train; 0 when done, 2 on a bad flag or dataset."""
    return train_command(argv, DEFAULTS, make_task)


if __name__ == "__main__":
    sys.exit(main())
