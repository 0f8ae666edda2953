"""Command-line options shared by the training commands.

Every flag can also be given as an environment variable ``TRAIN_<FLAG>`` (upper case,
dashes as underscores, e.g. ``TRAIN_EPOCHS=3``, ``TRAIN_SYNTHETIC=1``); a flag on the
command line wins. ``parse(argv, defaults)`` returns a frozen ``TrainConfig`` (built once
from argparse's namespace, after every check) or raises ``ConfigError`` with a one-line
message; ``--help`` prints and exits 0 (``SystemExit``). The loop and the commands read
only the ``TrainConfig``, whose typed fields mypy checks.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from shared.argparser import OneLineParser
from training.environment import TRAINING_DEBUG_GPU_PATH, TRAINING_DEBUG_SAMPLE_LOG, TRAINING_TRACE_DIR
from training.errors import ConfigError

if TYPE_CHECKING:
    from training.gpu_defaults import DeviceInfo

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
    label_smoothing: float = 0.0
    norm_weight_decay: float | None = None  # None: the same as weight_decay
    # on CUDA, when --batch-size is not given (NVIDIA's ResNet-50 reference: 256 per GPU)
    gpu_batch_size: int | None = None
    # when set and --lr is not given: the rate per worker is lr_per_256 * batch size / 256
    # (Goyal et al.'s linear rule; 0.1 per 256 for ResNet-50), ``lr`` is then unused
    lr_per_256: float | None = None
    # on CUDA without --batch-size: gpu_batch_size is lowered to what fits the device's memory
    # (``training.gpu_defaults.fit_batch_size``) from the activations saved per image at 224 px
    # in 16-bit and the fixed cost; None: gpu_batch_size as it is
    gpu_image_bytes: int | None = None
    gpu_fixed_bytes: int = 0


@dataclass(frozen=True)
class TrainConfig:
    """One run's settings, checked and complete: built once by ``parse``, never changed
    (``resolve_device_defaults`` returns a new one). A field per flag, named like it
    (``--batch-size`` -> ``batch_size``); the image models' flags have their MNIST values
    (None/False) when the command has no such flag."""

    data_dir: str | None
    synthetic: bool
    synthetic_size: int
    epochs: int
    batch_size: int
    val_batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    norm_weight_decay: float
    label_smoothing: float
    warmup_epochs: float
    scale_up_ramp: float
    lr_milestones: tuple[int, ...]
    commit_every: int
    host_check_every: int
    log_every: int
    checkpoint_dir: str | None
    keep_checkpoints: int
    checkpoint_every: Every
    snapshot_dir: str | None
    snapshot_every: int
    metrics_file: str | None
    fp16_allreduce: bool
    allreduce_dtype: str
    no_cuda: bool
    no_amp: bool
    amp_dtype: str
    workers: int | None
    seed: int
    term_grace: float
    trace_dir: str | None
    debug_step_delay: float
    debug_sample_log: str | None
    debug_hold_file: str | None
    debug_pause_file: str | None
    debug_gpu_path: bool
    # whether --batch-size / --lr / --val-batch-size were given (else the device decides:
    # resolve_device_defaults)
    batch_size_given: bool
    lr_given: bool
    val_batch_size_given: bool
    # the image models' flags (``Defaults.image_size`` set)
    image_size: int | None = None
    num_classes: int | None = None
    zero_init_residual: bool = False
    # None until the device decides (--data-dir, neither --augment-on-device nor --no-...)
    augment_on_device: bool | None = False

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> TrainConfig:
        """The config of a parsed, checked namespace; ``TypeError`` when a flag has no field
        (a flag added without its field) or a field without a default is missing."""
        values = vars(ns)
        known = {f.name for f in fields(cls)}
        extra = sorted(set(values) - known)
        if extra:
            raise TypeError(f"flags without a TrainConfig field: {', '.join(extra)}")
        return cls(**values)


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


def _env_flag(key: str) -> bool:
    raw = os.environ.get(key, "").strip().lower()
    if raw in TRUE:
        return True
    if raw in FALSE:
        return False
    raise ConfigError(f"{key}={raw!r} is not a boolean (1/0, true/false)")


def _checked(kind, ok: Callable[[float], bool], rule: str):
    """An argparse ``type`` that converts to ``kind`` and requires ``ok(value)``."""
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} {rule}")
        return value
    check.__name__ = kind.__name__
    return check


def _positive(kind):
    return _checked(kind, lambda v: v > 0, "must be positive")


def _non_negative(kind):
    return _checked(kind, lambda v: v >= 0, "must not be negative")


def amp_dtype(text: str) -> str:
    """``fp16`` or ``bf16`` (argparse ``type``)."""
    if text not in AMP_DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(AMP_DTYPES)}")
    return text


AMP_DTYPES = ("fp16", "bf16")
ALLREDUCE_DTYPES = ("auto", "fp32", "fp16")


def allreduce_dtype(text: str) -> str:
    """``auto``, ``fp32`` or ``fp16`` (argparse ``type``)."""
    if text not in ALLREDUCE_DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(ALLREDUCE_DTYPES)}")
    return text


def _fraction(kind):
    return _checked(kind, lambda v: 0 <= v < 1, "must be in [0, 1)")


def milestones(text: str) -> tuple[int, ...]:
    """Parse ``"30,60,80"`` into a sorted tuple of positive epochs ("" = none)."""
    try:
        values = tuple(sorted(int(t) for t in text.split(",") if t.strip()))
    except ValueError:
        raise ConfigError(f"--lr-milestones {text!r} is not a comma-separated list of epochs") from None
    if any(v <= 0 for v in values):
        raise ConfigError(f"--lr-milestones {text!r}: epochs must be positive")
    return values


class Every(NamedTuple):
    """How often the background checkpoint is written: every ``steps`` steps or every
    ``seconds`` seconds of training (one of them set; checked at commits)."""

    steps: int | None = None
    seconds: float | None = None


UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def every(text: str) -> Every:
    """``--checkpoint-every``: ``N`` steps, or a duration ``N[.N]s|m|h`` (e.g. ``5m``)."""
    t = text.strip().lower()
    try:
        if t and t[-1] in UNITS:
            seconds = float(t[:-1]) * UNITS[t[-1]]
            if seconds > 0:
                return Every(seconds=seconds)
        elif int(t) > 0:
            return Every(steps=int(t))
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r}: want a number of steps (200) or a duration (90s, 5m, 1h), above 0")


MODEL = object()  # default: the ``Defaults`` field named like the flag


class Flag(NamedTuple):
    """One flag: ``kind`` is bool (a switch), str, int or float; ``check`` wraps the type."""

    flag: str
    kind: type
    default: object
    help: str
    check: Callable | None = None
    env: str | None = None  # another variable that sets it (before TRAIN_<FLAG>)

    def add_to(self, p: argparse.ArgumentParser, d: Defaults) -> None:
        name = self.flag[2:]
        default = getattr(d, name.replace("-", "_")) if self.default is MODEL else self.default
        default = _env(name, default, self.kind)
        if self.env:
            default = os.environ.get(self.env) or default
        kw: dict[str, Any] = {"default": default, "help": self.help}
        if self.kind is bool:  # a default of None: --flag / --no-flag, None when neither
            kw["action"] = argparse.BooleanOptionalAction if default is None else "store_true"
        elif self.check is not None:
            kw["type"] = self.check(self.kind)
        elif self.kind is not str:
            kw["type"] = self.kind
        p.add_argument(self.flag, **kw)


_FLAGS = (
    Flag("--synthetic-size", int, MODEL, "training samples with --synthetic (default %(default)s)",
         _positive),
    Flag("--epochs", int, MODEL, "epochs to train (default %(default)s)", _positive),
    Flag("--batch-size", int, None, "samples per worker per step (default: the model's, "
         "larger on CUDA; see --help's epilog)", _positive),
    Flag("--val-batch-size", int, None, "samples per worker per validation step (default: the "
         "model's; on CUDA at least --batch-size, as validation keeps no activations)", _positive),
    Flag("--lr", float, None, "learning rate of one worker; scaled by the world size (default: "
         "the model's; see --help's epilog)", _non_negative),
    Flag("--momentum", float, MODEL, "SGD momentum (default %(default)s)", _non_negative),
    Flag("--weight-decay", float, MODEL, "SGD weight decay (default %(default)s)", _non_negative),
    Flag("--norm-weight-decay", float, MODEL, "weight decay of normalisation weights and biases "
         "(every 1-D parameter; default %(default)s, None: as --weight-decay)", _non_negative),
    Flag("--label-smoothing", float, MODEL, "label smoothing of the cross-entropy loss "
         "(default %(default)s)", _fraction),
    Flag("--warmup-epochs", float, MODEL,
         "epochs of linear warm-up to the scaled rate (default %(default)s)", _non_negative),
    Flag("--scale-up-ramp", float, 0.25, "after the world grows, ramp the rate linearly from the "
         "old world's to the new one's over this part of an epoch (0: at once; a smaller world "
         "takes its rate at once; default %(default)s)", _non_negative),
    Flag("--lr-milestones", str, MODEL,
         "epochs after which the rate is multiplied by 0.1, e.g. 30,60,80"),
    Flag("--commit-every", int, 100, "commit the elastic state every N steps: a commit copies the "
         "model and optimizer and waits for the GPU, and a failure loses the steps since the last "
         "one (default %(default)s)", _positive),
    Flag("--host-check-every", int, 10, "between commits, check for added or removed hosts every "
         "N steps (cheap; a change commits first; default %(default)s)", _positive),
    Flag("--log-every", int, 50, "a progress metrics line every N steps (written at the next commit), "
         "0 = only per epoch (default %(default)s)", _non_negative),
    Flag("--checkpoint-dir", str, None,
         "rank 0 writes a checkpoint here each epoch, every --checkpoint-every and on SIGTERM; "
         "a new job resumes from the newest (or from a newer local snapshot)"),
    Flag("--checkpoint-every", str, "5m", "also write a checkpoint every N steps (200) or every "
         "duration of training (90s, 5m, 1h), from the state of a commit, in the background "
         "(default %(default)s)", lambda kind: every),
    Flag("--snapshot-dir", str, None, "with --checkpoint-dir, each host keeps the newest "
         "committed state here (pod-local storage; default $TMPDIR or /tmp, "
         "training-snapshots/<job>): a new world starts from the newest one any worker holds"),
    Flag("--snapshot-every", int, 1, "write the local snapshot every N commits, in the "
         "background (0: never; default %(default)s)", _non_negative),
    Flag("--keep-checkpoints", int, 3, "checkpoints kept in --checkpoint-dir (default %(default)s)",
         _positive),
    Flag("--metrics-file", str, None, "append JSON-lines metrics here (rank 0; also printed on stdout)"),
    Flag("--fp16-allreduce", bool, False, "compress gradients to fp16 for the allreduce (the "
         "same as --allreduce-dtype fp16)"),
    Flag("--allreduce-dtype", str, "auto", "type of the gradients in the allreduce: fp32, fp16 "
         "or auto: fp16 on the GPU path with fp16 mixed precision (the gradient scaler catches "
         "an overflow), else fp32 (default %(default)s)", lambda kind: allreduce_dtype),
    Flag("--no-cuda", bool, False, "train on the CPU even when CUDA is available"),
    Flag("--no-amp", bool, False, "no automatic mixed precision on CUDA"),
    Flag("--amp-dtype", str, "fp16", "mixed-precision type on CUDA: fp16 (with a gradient scaler) "
         "or bf16 (no scaler; Ampere and newer) (default %(default)s)", lambda kind: amp_dtype),
    Flag("--workers", int, None, "data-loading processes per worker (default on CUDA: the "
         "worker's share of the CPUs the pod may use, minus one for the training process; "
         "0 on CPU)", _non_negative),
    Flag("--seed", int, 42,
         "seed of the model initialisation and the epoch shuffles (default %(default)s)"),
    Flag("--term-grace", float, 20.0, "after SIGTERM, seconds to reach the next commit before leaving "
         "anyway (default %(default)s; keep it below the pod's termination grace period)", _positive),
    Flag("--trace-dir", str, None, "debug: each worker writes the sample indices it commits and its "
         "final parameter checksum here (also TRAINING_TRACE_DIR)", env=TRAINING_TRACE_DIR),
    Flag("--debug-step-delay", float, 0.0, "debug: sleep this many seconds after every step, to watch "
         "or test elastic events on tiny data (default 0)", _non_negative),
    Flag("--debug-sample-log", str, None, "debug: each worker appends the sample indices of every "
         "step it trains, with its world, commits and resets, here (training.sample_log; also "
         "TRAINING_DEBUG_SAMPLE_LOG)", env=TRAINING_DEBUG_SAMPLE_LOG),
    Flag("--debug-hold-file", str, None, "debug: while this file exists, apply --debug-step-delay and "
         "hold before the run's last step"),
    Flag("--debug-pause-file", str, None, "debug: while this file exists, every rank waits before "
         "its next step (still taking host changes), e.g. for a scale-up to land at a set point"),
    Flag("--debug-gpu-path", bool, False, "debug: on the CPU, take the code path CUDA takes "
         "(channels_last, mixed precision of --amp-dtype, gradient scaler, data-loading processes "
         "started by forkserver); only the device differs (also TRAINING_DEBUG_GPU_PATH=1)"),
)
_IMAGE_FLAGS = (  # the image models' flags (``Defaults.image_size`` set)
    Flag("--image-size", int, MODEL,
         "square input size in pixels, at least 64 (default %(default)s)", _positive),
    Flag("--num-classes", int, MODEL,
         "classes with --synthetic (default %(default)s); else the dataset's", _positive),
    Flag("--zero-init-residual", bool, False,
         "start each residual block's last BatchNorm at zero (Goyal et al.)"),
    Flag("--augment-on-device", bool, None,
         "the loading processes only read the JPEG files; the training process decodes them "
         "(nvJPEG on CUDA) and crops, flips and normalises each batch on its device: for when "
         "the CPUs cannot keep the GPU fed (needs --data-dir; default: on for a GPU with a "
         "hardware JPEG decoder, A100, H100, L4 and later, else off)"),
)


def _device_defaults(given_batch: int | None, given_lr: float | None, d: Defaults,
                     cuda: bool) -> tuple[int, float]:
    """(batch size, rate): the given ones, else the model's batch size (``gpu_batch_size`` on
    CUDA) and the rate ``lr_per_256 * batch / 256`` (else ``lr``)."""
    if given_batch is not None:
        batch = given_batch
    else:
        batch = d.gpu_batch_size if cuda and d.gpu_batch_size else d.batch_size
    if given_lr is not None:
        return batch, given_lr
    return batch, d.lr_per_256 * batch / 256 if d.lr_per_256 else d.lr


def resolve_device_defaults(cfg: TrainConfig, d: Defaults, cuda: bool,
                            device: DeviceInfo | None = None) -> TrainConfig:
    """``cfg`` with ``--batch-size`` and ``--lr`` filled for the device when they were not
    given (``_device_defaults``; on CUDA with the ``device``'s properties, the model's GPU
    batch lowered to what fits its memory), ``--val-batch-size`` on CUDA at least that batch,
    and ``--augment-on-device`` when the device decides it (``training.gpu_defaults``).
    ``parse`` fills them for the CPU; the command
    calls this once it knows whether CUDA is used."""
    from training import gpu_defaults as gd

    if cuda and device is not None and d.gpu_batch_size and d.gpu_image_bytes:
        per_image = gd.activation_bytes(d.gpu_image_bytes, cfg.image_size or 224, not cfg.no_amp)
        d = replace(d, gpu_batch_size=gd.fit_batch_size(device.total_memory, per_image,
                                                        d.gpu_fixed_bytes, d.gpu_batch_size))
    batch, lr = _device_defaults(cfg.batch_size if cfg.batch_size_given else None,
                                 cfg.lr if cfg.lr_given else None, d, cuda)
    augment = cfg.augment_on_device
    if augment is None:
        augment = cuda and gd.augment_on_device_default(device)
    val = cfg.val_batch_size
    if cuda and not cfg.val_batch_size_given:  # no saved activations: a training batch fits
        val = max(d.val_batch_size, batch)
    return replace(cfg, batch_size=batch, lr=lr, augment_on_device=augment, val_batch_size=val)


def parse(argv: list[str] | None, d: Defaults) -> TrainConfig:
    """Parse ``argv`` (None = sys.argv[1:]) with the environment as defaults."""
    p = OneLineParser(prog=d.prog, raises=ConfigError, description=d.description,
                epilog=f"Defaults: --batch-size {d.batch_size}"
                + (f" ({d.gpu_batch_size} on CUDA" + (", less when that does not fit the GPU's memory)"
                                                    if d.gpu_image_bytes else ")")
                   if d.gpu_batch_size else "")
                + (f", --lr {d.lr_per_256} x batch size / 256" if d.lr_per_256 else f", --lr {d.lr}")
                + ". Every flag may also be set as TRAIN_<FLAG> in the environment.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-dir", default=_env("data-dir", None, str),
                     help="dataset directory (read only; nothing is downloaded)")
    src.add_argument("--synthetic", action="store_true", default=_env("synthetic", False, bool),
                     help="train on generated data instead of --data-dir")
    for spec in _FLAGS + (_IMAGE_FLAGS if d.image_size is not None else ()):
        spec.add_to(p, d)
    args = p.parse_args(argv)
    args.batch_size_given, args.lr_given = args.batch_size is not None, args.lr is not None
    args.batch_size, args.lr = _device_defaults(args.batch_size, args.lr, d, cuda=False)
    args.val_batch_size_given = args.val_batch_size is not None
    if args.val_batch_size is None:
        args.val_batch_size = d.val_batch_size
    if not args.data_dir and not args.synthetic:
        raise ConfigError("one of --data-dir DIR or --synthetic is required")
    args.lr_milestones = milestones(args.lr_milestones)
    if args.norm_weight_decay is None:
        args.norm_weight_decay = args.weight_decay
    if not args.debug_gpu_path:
        args.debug_gpu_path = _env_flag(TRAINING_DEBUG_GPU_PATH)
    if getattr(args, "augment_on_device", False) is None and not args.data_dir:
        args.augment_on_device = False  # nothing to decode: not the device's choice
    if getattr(args, "augment_on_device", False) and not args.data_dir:
        raise ConfigError("--augment-on-device decodes image files: it needs --data-dir, "
                          "not --synthetic")
    if d.image_size is not None and args.image_size < 64:
        raise ConfigError(f"--image-size {args.image_size} is below the minimum of 64")
    return TrainConfig.from_namespace(args)
