"""What both commands share around the loop: ``main`` turns our errors into one line."""

from __future__ import annotations

import sys
from typing import Callable

from training.errors import TrainingError

EXIT_ERROR = 2


def guarded(body: Callable[[], int]) -> int:
    """Run ``body``; a ``TrainingError`` becomes ``error: <message>`` on stderr and exit 2.

    ``--help`` (argparse's ``SystemExit``) returns its code instead of raising.
    """
    try:
        return body()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except TrainingError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.stderr.flush()
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
