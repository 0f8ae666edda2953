"""What both commands share around the loop: parse, build the task, train, and turn every
failure into one line and an exit code.

The contract (the project's, ``shared.exitcodes``, through its runner ``shared.runner``): 0
when training is done; 2 for bad input or usage (``InputError``: a bad flag, a missing or
malformed dataset); 1 for a runtime failure (any other error, ours or not: a torch or Horovod
error is one line too); 128 + N when ended by signal N (SIGTERM: 143, from
``training.signals``; Ctrl-C: 130). Each failure is one line ``error: <cause>`` on stderr;
``TRAINING_TRACEBACK=1`` adds the traceback of an unexpected error before it. ``--help``
prints and exits 0 (argparse's ``SystemExit``)."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shared.runner import run_main
from training import options
from training.environment import TRAINING_TRACEBACK
from training.errors import InputError, TrainingError

if TYPE_CHECKING:
    from training.gpu_defaults import DeviceInfo


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line. An error re-raised by a DataLoader worker carries
    the worker's traceback in its message; its last line holds the original message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else type(exc).__name__
    last = lines[-1]
    prefix = f"{type(exc).__module__}.{type(exc).__name__}: "
    return last[len(prefix):] if last.startswith(prefix) else last


def describe(exc: BaseException) -> str:
    """The cause in the ``error:`` line: a ``TrainingError``'s message, any other error's type
    and message (``RuntimeError: CUDA out of memory``), each on one line (``one_line``)."""
    text = one_line(exc)
    return text if isinstance(exc, TrainingError) else f"{type(exc).__name__}: {text}"


def guarded(prog: str, body: Callable[[], int]) -> int:
    """Run ``body`` and return its exit code; every failure becomes one line and a code
    (module docstring) through ``shared.runner.run_main``."""
    def traced() -> int:
        try:
            return body()
        except TrainingError:
            raise
        except Exception:  # a runtime failure we did not foresee: still one line, exit 1
            if os.environ.get(TRAINING_TRACEBACK) == "1":
                traceback.print_exc()
            raise
    return run_main(prog, traced, usage=InputError, failure=Exception, interrupted="interrupted",
                    describe=describe)


def train_command(argv: list[str] | None, defaults: options.Defaults,
                  make_task: Callable[[options.TrainConfig], Any]) -> int:
    """A command's ``main``: parse ``argv`` with ``defaults`` into a ``TrainConfig``,
    ``make_task(args)`` (which checks the data before torch and Horovod are imported, unless
    the device must first decide ``--augment-on-device``, which picks the datasets), then
    ``training.loop.run`` with the device's defaults (``resolve``); ``guarded``: the exit code."""
    def body() -> int:
        args = options.parse(argv, defaults)
        early = args.augment_on_device is None  # the device decides it: before the datasets
        if early:
            args = resolve(args, defaults)
        task = make_task(args)
        from training.loop import run

        return run(task, args if early else resolve(args, defaults))
    return guarded(defaults.prog, body)


def resolve(args: options.TrainConfig, defaults: options.Defaults) -> options.TrainConfig:
    """``args`` with the defaults the device decides (``options.resolve_device_defaults``:
    batch size, rate, ``--augment-on-device``); on CUDA one line on stderr says what they
    are and why."""
    from training.gpu_defaults import probe
    from training.loop import local_rank_hint, log, use_cuda

    cuda = use_cuda(args)
    device = probe(local_rank_hint()) if cuda else None
    resolved = options.resolve_device_defaults(args, defaults, cuda, device)
    if device is not None and (not args.batch_size_given or args.augment_on_device is None):
        log(device_line(device, resolved, defaults, augment_decided=args.augment_on_device is None))
    return resolved


def device_line(device: DeviceInfo, cfg: options.TrainConfig, d: options.Defaults,
                augment_decided: bool) -> str:
    """What the device chose, e.g. ``NVIDIA T4 (14.6 GiB, 7.5): --batch-size 128 (256 does not
    fit), --augment-on-device off (no hardware JPEG decoder)``."""
    from training.gpu_defaults import GIB, has_jpeg_engine

    parts = []
    if not cfg.batch_size_given:
        lowered = d.gpu_batch_size and cfg.batch_size < d.gpu_batch_size
        parts.append(f"--batch-size {cfg.batch_size}"
                     + (f" ({d.gpu_batch_size} does not fit)" if lowered else ""))
    if augment_decided:
        engine = has_jpeg_engine(device.name, device.capability)
        parts.append(f"--augment-on-device {'on' if cfg.augment_on_device else 'off'}"
                     + (" (hardware JPEG decoder)" if engine else " (no hardware JPEG decoder)"))
    cc = f"{device.capability[0]}.{device.capability[1]}"
    return f"{device.name} ({device.total_memory / GIB:.1f} GiB, {cc}): " + ", ".join(parts)
