"""What both commands share around the loop: parse, build the task, train, and turn our
errors into one line."""

from __future__ import annotations

import sys
from typing import Callable

from training import options
from training.errors import TrainingError

EXIT_ERROR = 2


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line. An error re-raised by a DataLoader worker carries
    the worker's traceback in its message; its last line holds the original message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else type(exc).__name__
    last = lines[-1]
    prefix = f"{type(exc).__module__}.{type(exc).__name__}: "
    return last[len(prefix):] if last.startswith(prefix) else last


def guarded(body: Callable[[], int]) -> int:
    """Run ``body``; a ``TrainingError`` becomes ``error: <message>`` on stderr and exit 2.

    ``--help`` (argparse's ``SystemExit``) returns its code instead of raising.
    """
    try:
        return body()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except TrainingError as exc:
        sys.stderr.write(f"error: {one_line(exc)}\n")
        sys.stderr.flush()
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130


def train_command(argv: list[str] | None, defaults: options.Defaults, make_task: Callable) -> int:
    """A command's ``main``: parse ``argv`` with ``defaults``, ``make_task(args)`` (which checks
    the data before torch and Horovod are imported), then ``training.loop.run``; ``guarded``."""
    def body() -> int:
        args = options.parse(argv, defaults)
        task = make_task(args)
        from training.loop import run

        return run(task, args)
    return guarded(body)
