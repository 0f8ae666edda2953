"""Command-line options shared by the training commands.

Every flag can also be given as an environment variable ``TRAIN_<FLAG>`` (upper case,
dashes as underscores, e.g. ``TRAIN_EPOCHS=3``, ``TRAIN_SYNTHETIC=1``); a flag on the
command line wins. ``parse(argv, defaults)`` returns an ``argparse.Namespace`` or raises
``ConfigError`` with a one-line message; ``--help`` prints and exits 0 (``SystemExit``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from training.errors import ConfigError

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Defaults:
    """Per-model defaults for the shared flags."""

    prog: str
    description: str
    epochs: int
    batch_size: int
    val_batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    warmup_epochs: float
    lr_milestones: str
    synthetic_size: int
    image_size: int | None = None
    num_classes: int | None = None
    extra: dict = field(default_factory=dict)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, our error type, no usage dump
        raise ConfigError(message)


def _env(name: str, default, kind):
    key = "TRAIN_" + name.upper().replace("-", "_")
    raw = os.environ.get(key)
    if raw is None:
        return default
    if kind is bool:
        low = raw.strip().lower()
        if low in TRUE:
            return True
        if low in FALSE:
            return False
        raise ConfigError(f"{key}={raw!r} is not a boolean (1/0, true/false)")
    try:
        return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"{key}={raw!r} is not a valid {kind.__name__}") from exc


def _positive(kind):
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value
    check.__name__ = kind.__name__
    return check


def _non_negative(kind):
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
        return value
    check.__name__ = kind.__name__
    return check


def milestones(text: str) -> tuple[int, ...]:
    """Parse ``"30,60,80"`` into a sorted tuple of positive epochs ("" = none)."""
    try:
        values = tuple(sorted(int(t) for t in text.split(",") if t.strip()))
    except ValueError:
        raise ConfigError(f"--lr-milestones {text!r} is not a comma-separated list of epochs") from None
    if any(v <= 0 for v in values):
        raise ConfigError(f"--lr-milestones {text!r}: epochs must be positive")
    return values


def parse(argv: list[str] | None, d: Defaults) -> argparse.Namespace:
    """Parse ``argv`` (None = sys.argv[1:]) with the environment as defaults."""
    p = _Parser(prog=d.prog, description=d.description,
                epilog="Every flag may also be set as TRAIN_<FLAG> in the environment.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-dir", default=_env("data-dir", None, str),
                     help="dataset directory (read only; nothing is downloaded)")
    src.add_argument("--synthetic", action="store_true", default=_env("synthetic", False, bool),
                     help="train on generated data instead of --data-dir")
    p.add_argument("--synthetic-size", type=_positive(int),
                   default=_env("synthetic-size", d.synthetic_size, int),
                   help="training samples with --synthetic (default %(default)s)")
    p.add_argument("--epochs", type=_positive(int), default=_env("epochs", d.epochs, int),
                   help="epochs to train (default %(default)s)")
    p.add_argument("--batch-size", type=_positive(int),
                   default=_env("batch-size", d.batch_size, int),
                   help="samples per worker per step (default %(default)s)")
    p.add_argument("--val-batch-size", type=_positive(int),
                   default=_env("val-batch-size", d.val_batch_size, int),
                   help="samples per worker per validation step (default %(default)s)")
    p.add_argument("--lr", type=_non_negative(float), default=_env("lr", d.lr, float),
                   help="learning rate of one worker; scaled by the world size (default %(default)s)")
    p.add_argument("--momentum", type=_non_negative(float),
                   default=_env("momentum", d.momentum, float), help="SGD momentum (default %(default)s)")
    p.add_argument("--weight-decay", type=_non_negative(float),
                   default=_env("weight-decay", d.weight_decay, float),
                   help="SGD weight decay (default %(default)s)")
    p.add_argument("--warmup-epochs", type=_non_negative(float),
                   default=_env("warmup-epochs", d.warmup_epochs, float),
                   help="epochs of linear warm-up to the scaled rate (default %(default)s)")
    p.add_argument("--lr-milestones", default=_env("lr-milestones", d.lr_milestones, str),
                   help="epochs after which the rate is multiplied by 0.1, e.g. 30,60,80")
    p.add_argument("--commit-every", type=_positive(int),
                   default=_env("commit-every", 10, int),
                   help="commit the elastic state every N steps (default %(default)s)")
    p.add_argument("--log-every", type=_non_negative(int), default=_env("log-every", 50, int),
                   help="a progress metrics line every N steps (written at the next commit), "
                        "0 = only per epoch (default %(default)s)")
    p.add_argument("--checkpoint-dir", default=_env("checkpoint-dir", None, str),
                   help="rank 0 writes a checkpoint here each epoch; a new job resumes from the newest")
    p.add_argument("--keep-checkpoints", type=_positive(int),
                   default=_env("keep-checkpoints", 3, int),
                   help="checkpoints kept in --checkpoint-dir (default %(default)s)")
    p.add_argument("--metrics-file", default=_env("metrics-file", None, str),
                   help="append JSON-lines metrics here (rank 0; also printed on stdout)")
    p.add_argument("--fp16-allreduce", action="store_true",
                   default=_env("fp16-allreduce", False, bool),
                   help="compress gradients to fp16 for the allreduce")
    p.add_argument("--no-cuda", action="store_true", default=_env("no-cuda", False, bool),
                   help="train on the CPU even when CUDA is available")
    p.add_argument("--no-amp", action="store_true", default=_env("no-amp", False, bool),
                   help="no automatic mixed precision on CUDA")
    p.add_argument("--workers", type=_non_negative(int), default=_env("workers", None, int),
                   help="data-loading processes per worker (default 4 on CUDA, 0 on CPU)")
    p.add_argument("--seed", type=int, default=_env("seed", 42, int),
                   help="seed of the model initialisation and the epoch shuffles (default %(default)s)")
    p.add_argument("--term-grace", type=_positive(float), default=_env("term-grace", 20.0, float),
                   help="after SIGTERM, seconds to reach the next commit before leaving anyway "
                        "(default %(default)s; keep it below the pod's termination grace period)")
    p.add_argument("--trace-dir", default=os.environ.get("TRAINING_TRACE_DIR") or _env("trace-dir", None, str),
                   help="debug: each worker writes the sample indices it commits and its final "
                        "parameter checksum here (also TRAINING_TRACE_DIR)")
    p.add_argument("--debug-step-delay", type=_non_negative(float),
                   default=_env("debug-step-delay", 0.0, float),
                   help="debug: sleep this many seconds after every step, to watch or test "
                        "elastic events on tiny data (default 0)")
    p.add_argument("--debug-hold-file", default=_env("debug-hold-file", None, str),
                   help="debug: apply --debug-step-delay only while this file exists")
    if d.image_size is not None:
        p.add_argument("--image-size", type=_positive(int),
                       default=_env("image-size", d.image_size, int),
                       help="square input size in pixels, at least 64 (default %(default)s)")
        p.add_argument("--num-classes", type=_positive(int),
                       default=_env("num-classes", d.num_classes, int),
                       help="classes with --synthetic (default %(default)s); else the dataset's")
    args = p.parse_args(argv)
    if not args.data_dir and not args.synthetic:
        raise ConfigError("one of --data-dir DIR or --synthetic is required")
    args.lr_milestones = milestones(args.lr_milestones)
    if d.image_size is not None and args.image_size < 64:
        raise ConfigError(f"--image-size {args.image_size} is below the minimum of 64")
    return args
