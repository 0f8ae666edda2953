"""The one argument parser of the project's commands: ``OneLineParser``.

argparse whose usage errors are one line, ``error: <message> (see PROG --help)`` on stderr,
and exit ``EXIT_USAGE`` 2, instead of argparse's usage dump; ``--help`` is argparse's own. Kept
apart from ``shared.runner`` so that a command that parses its flags by hand (``discover-hosts``)
does not import argparse.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from shared.exitcodes import EXIT_USAGE


class OneLineParser(argparse.ArgumentParser):
    """argparse with ``error: <message> (see PROG --help)`` and exit 2 instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
