"""The one argument parser of the project's commands: ``OneLineParser``.

argparse whose usage errors are one line, ``error: <message> (see PROG --help)`` on stderr,
and exit ``EXIT_USAGE`` 2, instead of argparse's usage dump; ``--help`` is argparse's own. Kept
apart from ``shared.runner`` so that a command that parses its flags by hand (``discover-hosts``)
does not import argparse. ``OneLineParser(..., raises=SomeError)`` raises the same message as
``SomeError`` instead, for a command whose runner prints it (``training``: its ``ConfigError``,
so ``training.options.parse`` can be tested without a process exit).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from shared.exitcodes import EXIT_USAGE


class OneLineParser(argparse.ArgumentParser):
    """argparse with ``error: <message> (see PROG --help)`` and exit 2 instead of usage + message
    (or ``raises(<message> (see PROG --help))``, see the module docstring)."""

    def __init__(self, *args: Any, raises: Callable[[str], Exception] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._raises = raises

    def error(self, message: str) -> NoReturn:
        text = f"{message} (see {self.prog} --help)"
        if self._raises is not None:
            raise self._raises(text)
        print(f"error: {text}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
