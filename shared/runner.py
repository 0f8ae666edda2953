"""The one command runner of the project: every command's ``main`` ends in ``run_main``.

``run_main(prog, body, usage=..., failure=...) -> exit code`` calls ``body()`` and returns its
code; an exception of ``failure`` (the package's base error) becomes one line ``error: <cause>``
on stderr and a code: its ``exit_code`` attribute if it has one (e.g. ``elastic``'s
``Interrupted``: 128 + its signal), else ``EXIT_USAGE`` 2 for ``usage`` (bad input), else
``EXIT_FAILURE`` 1; Ctrl-C is ``error: <interrupted>`` (default ``<prog> interrupted``) and
``EXIT_INTERRUPTED`` 130 -- never a traceback. Anything else propagates (a bug keeps its
traceback). ``describe(exc)`` (default ``str``) is the cause's text: ``training`` gives one
that cuts a multi-line message (a DataLoader worker's traceback) to its last line. The
contract is written once in docs/architecture.md ("Errors and exit codes"); the usage-error
parser is ``shared.argparser.OneLineParser``.

Standard library only and cheap to import (no argparse, no ``typing``, which pulls in ``re``,
``enum`` and ``collections``): ``discover-hosts`` runs every second.
"""
from __future__ import annotations

import sys

from shared.exitcodes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE

TYPE_CHECKING = False
if TYPE_CHECKING:  # for the annotations only; never imported at run time
    from collections.abc import Callable


def run_main(prog: str, body: Callable[[], int], *,
             usage: type[BaseException] | tuple[type[BaseException], ...],
             failure: type[BaseException] | tuple[type[BaseException], ...],
             interrupted: str | None = None, describe: Callable[[BaseException], str] = str) -> int:
    """Run ``body``; map ``failure`` errors (``usage`` ones: bad input) and Ctrl-C to one
    stderr line and an exit code (module docstring)."""
    try:
        return body()
    except KeyboardInterrupt:
        sys.stderr.write(f"error: {interrupted or prog + ' interrupted'}\n")
        return EXIT_INTERRUPTED
    except failure as exc:
        sys.stderr.write(f"error: {describe(exc)}\n")
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int):
            return code
        return EXIT_USAGE if isinstance(exc, usage) else EXIT_FAILURE
