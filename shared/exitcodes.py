"""The exit codes every command of the project returns (the contract in docs/architecture.md,
"Errors and exit codes"), written once: standard library only, nothing imported.

- ``EXIT_OK`` 0: done (``discover-hosts``: a trusted answer printed).
- ``EXIT_FAILURE`` 1: a failure at run time, one ``error:`` line on stderr (no answer, a
  host unreachable, a sync failed...).
- ``EXIT_USAGE`` 2: bad input (flags, settings, files), one ``error:`` line, nothing done.
- ``EXIT_NO_CAPACITY`` 75 (``EX_TEMPFAIL``): ``elastic-run`` only: the first world did not
  form within ``--first-world-timeout`` (too few slots: a capped pool); try again later
  (``elastic.launch.gang``).
- ``EXIT_WORKERS_FAILING`` 69 (``EX_UNAVAILABLE``): ``elastic-run`` only: the first world did
  not form within ``--first-world-timeout`` and capacity is not what is missing: workers that
  have their place crash-loop, cannot start, fail their preparation or stay unready
  (``elastic.launch.shortfall``); a retry would meet the same failure, so deploy/'s Job
  counts it.
- ``EXIT_FENCED`` 76 (``EX_PROTOCOL``): ``elastic-run --leader-election`` only: this launcher
  led the job and lost its Lease (not renewed within the renew deadline: it was paused, its
  node froze, the API was out of reach; or another launcher holds it). It killed its own
  processes (horovodrun's session, the daemon) without touching the workers, the rendezvous or
  the checkpoint, and exited; the launcher that holds the Lease leads the job
  (``elastic.launch.fencing``).
- ``EXIT_CANNOT_RUN`` 127: a wrapper (``elastic.worker.lease``) could not start its command
  (the shell's "command not found").
- ``EXIT_INTERRUPTED`` 130: Ctrl-C (128 + SIGINT); a command ended by another signal
  returns 128 + that signal (``exit_for_signal``; ``SIGNAL_BASE`` 128 is where those start),
  and a child killed by signal N, which ``subprocess`` reports as -N, is told as 128 + N
  (``exit_for_returncode``).
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_WORKERS_FAILING = 69  # EX_UNAVAILABLE
EXIT_NO_CAPACITY = 75  # EX_TEMPFAIL
EXIT_FENCED = 76  # EX_PROTOCOL
EXIT_CANNOT_RUN = 127
SIGNAL_BASE = 128
EXIT_INTERRUPTED = 130  # 128 + SIGINT


def exit_for_signal(signum: int) -> int:
    """What a shell reports for a process ended by signal ``signum``: 128 + ``signum``."""
    return SIGNAL_BASE + signum


def exit_for_returncode(returncode: int) -> int:
    """A ``subprocess`` return code as a shell exit code: -N (killed by signal N) is 128 + N."""
    return exit_for_signal(-returncode) if returncode < 0 else returncode
