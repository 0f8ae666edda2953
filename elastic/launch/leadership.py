"""``elastic-run --leader-election``: launchers of one job (same ``--job-id``) elect one leader
through a Lease (``elastic.leader``); only the leader runs the job.

``run_as_leader(plan, settings, execute) -> exit code`` blocks:

1. **Warm standby.** The caller made the plan (imports done, every command line decided);
   here the API client is made and the election starts. While another launcher holds a live
   Lease: ``elastic-run: standing by for job <id> (led by <holder>)``, once per leader seen.
   Nothing that touches the job runs before leading: the discovery daemon's prepare hook pins,
   syncs and reaps hosts, so the standby does not start it.
2. **Leading.** ``elastic-run: leading job <id>``; a ``Fence`` (``elastic.launch.fencing``) renews
   the Lease and ends this launcher with ``EXIT_FENCED`` the moment leadership is lost. A
   leader that took the Lease over from another launcher adopts the running world when the
   job has an adoption window (``--adopt-window``): ``elastic-run: job <id>: took over from
   <holder>: adopting its running world``, and the run is ``plan.for_adoption``'s (horovodrun
   takes the world over, ``ElasticDriver.adopt``; it says, and starts the job again, when the
   world is not whole). Without a window it says ``...; without --adopt-window its running
   world is not adopted: resuming from the last commit``: the old world's workers end (hvdrun's
   own stop on its launcher's death, the worker lease, this run's reap of earlier runs) and
   this run starts the job again from the workers' snapshots and the checkpoint, as a retry
   does.
3. **The end.** ``execute(plan, fence)``'s exit code is returned. Exit 0, 2 (bad input) or 69
   (workers failing) are verdicts a standby would meet again: the Lease is marked finished
   (``elastic.leader.rules.FINISHED_ANNOTATION``) and released, and a standby that saw this
   leader exits with the same code (``elastic-run: job <id> finished under <holder> (exit N)``).
   Any other end (a signal, a drain, no capacity) releases the Lease: a standby takes over at
   once instead of waiting for it to expire.

SIGTERM or SIGINT while standing by: ``Interrupted`` (128+N), nothing was started.
"""
from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from elastic.errors import Interrupted
from elastic.launch.fencing import Fence
from elastic.launch.plan import LaunchPlan, for_adoption
from elastic.leader.elector import ElectionSettings, LeaseElector, connect
from shared.exitcodes import EXIT_OK, EXIT_USAGE, EXIT_WORKERS_FAILING

VERDICTS = (EXIT_OK, EXIT_USAGE, EXIT_WORKERS_FAILING)  # exits a standby would only repeat
VALID_UNTIL_NAME = "leader-valid-until"  # in the work directory: the fence's end, for horovodrun


def _say(line: str) -> None:
    print(f"elastic-run: {line}", file=sys.stderr, flush=True)


def _campaign(elector: LeaseElector, job_id: str):
    """Block until leading or finished (``elector.campaign``); SIGTERM/SIGINT end the wait."""
    stop, received = threading.Event(), []

    def on_signal(signum, _frame) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = elector.campaign(stop, lambda holder: _say(f"standing by for job {job_id} (led by {holder})"))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise Interrupted(f"stopped by signal {received[0]} while standing by for job {job_id}", received[0])
    return result


def run_as_leader(plan: LaunchPlan, settings: ElectionSettings,
                  execute: Callable[[LaunchPlan, Fence], int]) -> int:
    """Stand by, lead, run, hand the Lease back (module docstring). Blocks."""
    elector = LeaseElector(connect(settings), settings.namespace, settings.name, settings.identity,
                           settings.timings)
    finished = _campaign(elector, plan.job_id)
    if finished is not None:
        _say(f"job {plan.job_id} finished under {finished.holder or 'another launcher'} "
             f"(exit {finished.exit_code}): nothing to lead")
        return finished.exit_code
    _say(f"leading job {plan.job_id} (Lease {settings.namespace}/{settings.name}, as {settings.identity})")
    if elector.took_over_from and plan.adopt_window:
        _say(f"job {plan.job_id}: took over from {elector.took_over_from}: adopting its running world")
        plan = for_adoption(plan)
    elif elector.took_over_from:
        _say(f"job {plan.job_id}: took over from {elector.took_over_from}; without --adopt-window its running "
             "world is not adopted: resuming from the last commit")
    fence = Fence(elector, plan.job_id, valid_until_file=Path(plan.workdir) / VALID_UNTIL_NAME)
    fence.start()
    code = None
    try:
        code = execute(plan, fence)
        return code
    finally:
        fence.stop()
        if code in VERDICTS:
            elector.finish(code)
        else:
            elector.release()
