"""The localcluster package's one command runner (``local-cluster``).

``run_main(prog, body) -> exit code`` calls ``body()`` and returns its code; errors become one
line ``error: <cause>`` on stderr and a code: ``UsageError`` 2, any other
``LocalClusterError`` 1, Ctrl-C 130 -- never a traceback. ``OneLineParser``: argparse whose
usage errors are that one line and exit 2 too. The contract is written once in
docs/architecture.md ("Errors and exit codes").
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from .errors import LocalClusterError, UsageError


class OneLineParser(argparse.ArgumentParser):
    """argparse with ``error: <message> (see PROG --help)`` and exit 2 instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def run_main(prog: str, body: Callable[[], int]) -> int:
    """Run ``body``; map the package's errors to one stderr line and an exit code."""
    try:
        return body()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LocalClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"error: {prog} interrupted", file=sys.stderr)
        return 130
