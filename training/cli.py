"""What both commands share around the loop: parse, build the task, train, and turn every
failure into one line and an exit code.

The contract: 0 when training is done; 2 for bad input or usage (``InputError``: a bad flag,
a missing or malformed dataset); 1 for a runtime failure (any other error, ours or not);
128 + N when ended by signal N (SIGTERM: 143, from ``training.signals``; Ctrl-C: 130).
Each failure is one line ``error: <cause>`` on stderr; ``TRAINING_TRACEBACK=1`` adds the
traceback of an unexpected error before it."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from training import options
from training.errors import EXIT_FAILURE, TrainingError


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line. An error re-raised by a DataLoader worker carries
    the worker's traceback in its message; its last line holds the original message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else type(exc).__name__
    last = lines[-1]
    prefix = f"{type(exc).__module__}.{type(exc).__name__}: "
    return last[len(prefix):] if last.startswith(prefix) else last


def fail(message: str, code: int) -> int:
    """Write ``error: <message>`` on stderr; return ``code``."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return code


def guarded(body: Callable[[], int]) -> int:
    """Run ``body`` and return its exit code; a ``TrainingError`` becomes its ``exit_code``
    (2 for bad input, 1 otherwise), any other exception 1, Ctrl-C 130, each with one line
    ``error: ...`` on stderr. ``--help`` (argparse's ``SystemExit``) returns its code."""
    try:
        return body()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except TrainingError as exc:
        return fail(one_line(exc), exc.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", 128 + signal.SIGINT)
    except Exception as exc:  # a runtime failure we did not foresee: still one line, exit 1
        if os.environ.get("TRAINING_TRACEBACK") == "1":
            traceback.print_exc()
        return fail(f"{type(exc).__name__}: {one_line(exc)}", EXIT_FAILURE)


def train_command(argv: list[str] | None, defaults: options.Defaults,
                  make_task: Callable[[options.TrainConfig], Any]) -> int:
    """A command's ``main``: parse ``argv`` with ``defaults`` into a ``TrainConfig``,
    ``make_task(args)`` (which checks the data before torch and Horovod are imported), then
    ``training.loop.run``; ``guarded``."""
    def body() -> int:
        args = options.parse(argv, defaults)
        task = make_task(args)
        from training.loop import run, use_cuda

        return run(task, options.resolve_device_defaults(args, defaults, cuda=use_cuda(args)))
    return guarded(body)
