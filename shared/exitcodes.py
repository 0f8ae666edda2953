"""The exit codes every command of the project returns (the contract in docs/architecture.md,
"Errors and exit codes"), written once: standard library only, nothing imported.

- ``EXIT_OK`` 0: done (``discover-hosts``: a trusted answer printed).
- ``EXIT_FAILURE`` 1: a failure at run time, one ``error:`` line on stderr (no answer, a
  host unreachable, a sync failed...).
- ``EXIT_USAGE`` 2: bad input (flags, settings, files), one ``error:`` line, nothing done.
- ``EXIT_NO_CAPACITY`` 75 (``EX_TEMPFAIL``): ``elastic-run`` only: the first world did not
  form within ``--first-world-timeout`` (too few slots: a capped pool); try again later
  (``elastic.launch.gang``).
- ``EXIT_INTERRUPTED`` 130: Ctrl-C (128 + SIGINT); a command ended by another signal
  returns 128 + that signal (``exit_for_signal``).
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NO_CAPACITY = 75  # EX_TEMPFAIL
EXIT_INTERRUPTED = 130  # 128 + SIGINT


def exit_for_signal(signum: int) -> int:
    """What a shell reports for a process ended by signal ``signum``: 128 + ``signum``."""
    return 128 + signum
