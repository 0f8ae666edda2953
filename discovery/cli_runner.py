"""The discovery package's one command runner (``discovery-daemon`` and ``discover-hosts``).

``run_main(prog, body) -> exit code`` calls ``body()`` and returns its code; the package's
errors become one line ``error: <cause>`` on stderr and a code: ``ConfigError`` (bad input,
``UsageError`` included) 2, any other ``DiscoveryError`` 1, Ctrl-C 130 -- never a traceback
(the codes are ``shared.exitcodes``').
The contract is written once in docs/architecture.md ("Errors and exit codes").

Standard library only and cheap to import (no argparse, no ``typing``, which pulls in ``re``,
``enum`` and ``collections``): ``discover-hosts`` runs every second.
"""
from __future__ import annotations

import sys

from discovery.errors import ConfigError, DiscoveryError
from shared.exitcodes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE

TYPE_CHECKING = False
if TYPE_CHECKING:  # for the annotations only; never imported at run time
    from collections.abc import Callable


def run_main(prog: str, body: Callable[[], int]) -> int:
    """Run ``body``; map the package's errors to one stderr line and an exit code."""
    try:
        return body()
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    except DiscoveryError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        sys.stderr.write(f"error: {prog} interrupted\n")
        return EXIT_INTERRUPTED
