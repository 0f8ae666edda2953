"""The launcher's executor: ``run(config) -> exit code`` makes the plan
(``elastic.launch.plan.make_plan``: every command line, path and variable, decided without
side effects) and ``execute(plan)`` carries it out, in these steps (blocks until the job ends):

1. discovery: use the daemon answering at ``config.discovery_url``; else, with a selector,
   start one (``ManagedDaemon``, ``plan.daemon``) whose ``--prepare-cmd`` pins each new host's SSH key and
   syncs the dataset to it before it is served; else ``LaunchError``;
2. the hosts served now: ``plan.steps``, i.e. ``ssh-bootstrap hosts`` (checks them, pins their keys) and, with a
   dataset, ``dataset-sync`` to them. Skipped when there are none yet, and when the daemon is
   ours with the prepare hook: it serves only hosts the hook has prepared. An external
   daemon's own hook (the launcher pod in deploy/) covers hosts that come later;
3. horovodrun (``build_horovodrun_command``; by default through ``elastic.driver.hvdrun``,
   whose driver long-polls the daemon in-process instead of running the script every
   second) in its own session, with ``DISCOVERY_URL`` set
   for ``discover-hosts`` and, with an identity, ssh-bootstrap's pinning ``ssh`` wrapper first
   on its PATH (``elastic.ssh.config.horovodrun_env``: checks the job's pinned host keys, keeps
   them out of ``~/.ssh/known_hosts``); before it starts, whatever earlier runs of the job
   (``plan.job_id``) left on the hosts served then is stopped (``elastic.common.reap``; the
   prepare hook does the same for each host it prepares); SIGINT to the launcher is forwarded
   to it; SIGTERM drains the training first (``_drain``: one SIGTERM to each training process,
   which commits, rank 0 checkpoints, and leaves; up to ``plan.term_grace`` seconds), then
   stops horovodrun's session;
   while fewer than ``plan.min_slots`` slots are served, which pods it waits for and why is
   logged (``elastic.launch.waits``); hvdrun's output is relayed through
   ``elastic.launch.console`` (the training's metrics lines as a live view on a terminal,
   plain lines otherwise, Horovod's expected abort as one info line); the driver's events go
   to ``plan.events_file``, which one monitor reads (``elastic.launch.monitor``) for the
   policies, each deciding a ``Stop(reason, exit_code)`` or a ``Note(line)`` that only this
   module acts on (``_act``): the stall watchdog (when no rank made progress for
   ``plan.stall_timeout`` seconds, what each was last seen doing; exit 1); bad input (every
   rank of the first world exited 2 before any commit, ``elastic.launch.badinput``: a bad
   training flag; exit 2 at once instead of waiting for other hosts up to
   ``--elastic-timeout``); with ``plan.first_world_timeout``, no world formed by its
   (jittered) deadline (``elastic.launch.gang``: a capped pool, free the workers, exit 75; or
   workers that have their place but fail, exit 69: ``elastic.launch.shortfall`` judges from
   the daemon's answers); and at the first step of the training, where the start-up went,
   phase by phase (``elastic.launch.phases``). A stop says why (again as the launcher's last
   line, after the report), stops horovodrun's whole session, and its exit code is the
   launcher's;
4. at the end (always; each step runs even when one before it failed, and a SIGINT/SIGTERM
   arriving meanwhile is noted, not obeyed: this is what stops the job's processes, and
   each step has a deadline): a horovodrun still running is stopped; the daemon watch (the
   host recorder's and the wait explainer's one subscription, ``elastic.launch.watch``) is
   stopped; the job's processes left on the hosts it saw are stopped (``elastic.common.reap``:
   workers carry ``ELASTIC_RUN_ID``; horovodrun
   stopped by a signal leaves them running otherwise; hosts still served are checked); a
   daemon we started is stopped; the timeline is printed to stderr (and written as JSON to
   ``config.timeline_file`` if given), the plot drawn (``plan.plot_file``), and one
   ``outputs:`` line names the files written.

Every process started here is tied to the launcher with ``PR_SET_PDEATHSIG``
(``elastic.common.procs``): if the launcher dies, ``kill -9`` included, the kernel kills the
daemon and the steps, and sends horovodrun ``plan.horovodrun_death_signal`` (hvdrun then
stops the job and reaps the hosts itself, see ``elastic.driver.hvdrun``).

The exit code is a policy's stop's (1 stalled, 2 bad input, 75 no first world), else
horovodrun's (128+N when it died of signal N; 2 when it failed and every training process
that ended exited 2: ``bad_input_exit``), or 128+N when the launcher
itself was ended by signal N (forwarded to horovodrun, which then exits as it likes; the
timeline still shows horovodrun's code). Errors before horovodrun starts raise
``ElasticError`` subclasses; the CLI turns them into one line (``Interrupted``: 128+N).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from elastic.common.hostlist import split_host_slots
from elastic.common.procs import tied_popen, tied_run
from elastic.common.reap import reap_hosts, term_hosts
from elastic.driver.hvdrun import LAUNCHER_GONE_SIGNAL
from elastic.environment import ELASTIC_LEADER_VALID_UNTIL
from elastic.errors import ElasticError, Interrupted, LaunchError, SSHError, SyncError
from elastic.launch import console, events, plot, timeline
from elastic.launch.badinput import BadInputPolicy
from elastic.launch.daemon import ManagedDaemon, fetch_hosts, probe
from elastic.launch.decisions import Decision, Note
from elastic.launch.fencing import Fence
from elastic.launch.gang import FirstWorldPolicy
from elastic.launch.leadership import run_as_leader
from elastic.launch.monitor import Monitor, Policy
from elastic.launch.outputs import outputs_line
from elastic.launch.phases import Marks, PhasePolicy, first_served
from elastic.launch.plan import LaunchConfig, LaunchPlan, horovodrun_env, make_plan
from elastic.launch.shortfall import ShortfallTracker
from elastic.launch.stall import StallPolicy
from elastic.launch.waits import WaitExplainer
from elastic.launch.warming import CacheWarmer
from elastic.launch.watch import DaemonWatch, HostRecorder
from elastic.prepare.hook import parse_dataset
from shared.event_kinds import Kind
from shared.exitcodes import EXIT_OK, EXIT_USAGE, SIGNAL_BASE, exit_for_returncode, exit_for_signal

log = logging.getLogger("elastic.run")


def _host_names(lines: Sequence[str]) -> list[str]:
    return [split_host_slots(line)[0] for line in lines]


def _run_step(argv: list[str], what: str, error: type[LaunchError] | type[SSHError] | type[SyncError]) -> None:
    """Run a helper command with its output passed through to stderr (killed with us)."""
    log.info("%s: %s", what, " ".join(argv))
    proc = tied_run(argv, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0:
        raise error(f"{what} failed with exit code {proc.returncode} (see its output above)")


class _SignalForwarder:
    """While installed, SIGINT/SIGTERM to this process go to the child instead; with
    ``on_term``, a SIGTERM calls it once (in a thread of its own) instead of going to the child."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, proc: subprocess.Popen, on_term: Callable[[], None] | None = None):
        self._proc = proc
        self._on_term = on_term
        self._previous: dict = {}
        self.received: list[int] = []

    def __enter__(self) -> _SignalForwarder:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _forward(self, signum, _frame) -> None:
        first_term = signum == signal.SIGTERM and signal.SIGTERM not in self.received
        self.received.append(signum)
        if self._on_term is not None and signum == signal.SIGTERM:
            if first_term:  # no I/O here: the main thread may be inside a write
                threading.Thread(target=self._on_term, name="sigterm-drain", daemon=True).start()
            return
        if self._proc.poll() is None:
            try:
                self._proc.send_signal(signum)
            except ProcessLookupError:
                pass


def _relayed_output(plan: LaunchPlan) -> dict:
    """Popen's stdout/stderr for horovodrun: pipes to the console relay when horovodrun is
    ``elastic.driver.hvdrun``, which goes quiet when the launcher (the pipes' reader) dies;
    plain horovodrun (``--discovery-mode script``) would meet broken pipes in its shutdown, so
    it keeps writing to the launcher's own stdout and stderr, unrelayed."""
    if plan.horovodrun_death_signal == int(LAUNCHER_GONE_SIGNAL):
        return {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return {}


class _Terminated(BaseException):
    """What the SIGTERM handler raises before the training starts; ``execute`` turns it into
    ``Interrupted``. A ``BaseException``, as ``KeyboardInterrupt`` is, because the handler
    raises wherever the main thread happens to be: inside logging's ``emit`` (which catches
    ``Exception`` and prints "--- Logging error ---"), a probe's retry loop, or any other
    ``except Exception``, an ``Exception`` would be swallowed there and the launcher would run
    on (a SIGTERM lost: seen in CI as a launcher still running 90 s after it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_caught: list[int] = []  # the signals _interrupt took during this execute, raised or not


def _interrupt(signum, _frame) -> None:
    """Raises ``_Terminated``, and notes the signal first: where Python ignores what a handler
    raises (in the fork hooks ``subprocess`` runs for a ``preexec_fn``, as in ``tied_popen``; in
    a ``__del__``), the note outlives the exception and ``_raise_if_lost`` raises it again.
    Seen in CI: a SIGTERM that landed in logging's after-fork hook while horovodrun started,
    printed as "Exception ignored in: <function _releaseLock>", and a launcher running on."""
    _caught.append(signum)
    raise _Terminated(signum)


def _raise_if_lost() -> None:
    """Raise ``_Terminated`` for a signal ``_interrupt`` took whose exception was ignored; call
    it after each fork and before the signal handlers change."""
    if _caught:
        raise _Terminated(_caught[0])


def exit_code(returncode: int) -> int:
    """A Popen returncode as a shell exit code (signals as 128+N)."""
    return exit_for_returncode(returncode)


def bad_input_exit(code: int, driver: Sequence[events.Record]) -> int:
    """The launcher's exit code for horovodrun's ``code``: 2 (bad input) when the job failed
    (1..127) and every training process that ended (the driver's ``worker_exit`` events) exited
    2, e.g. a bad training flag on every worker: horovodrun itself turns that into 1, which the
    launcher Job would retry (deploy/job/launcher.yaml fails the Job at once on 2). Else
    ``code``. Pure."""
    if not EXIT_OK < code < SIGNAL_BASE:
        return code
    exits = [r.detail.get("exit_code") for r in driver if r.kind == Kind.WORKER_EXIT]
    return EXIT_USAGE if exits and all(e == EXIT_USAGE for e in exits) else code


def run(config: LaunchConfig) -> int:
    """Plan the job (``elastic.launch.plan``) and execute the plan; see the module docstring.
    Blocks; returns horovodrun's exit code."""
    workdir = tempfile.mkdtemp(prefix="elastic-run-")
    try:
        plan = make_plan(config, run_id=config.run_id or uuid.uuid4().hex, workdir=workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    if config.election is not None:  # a warm standby until it leads (elastic.launch.leadership)
        warmer = CacheWarmer(parse_dataset(config.dataset)[0]) if config.dataset else None
        if warmer is not None:
            warmer.start()  # the dataset's hashes, while standing by (elastic.launch.warming)

        def lead(plan: LaunchPlan, fence: Fence) -> int:
            if warmer is not None:
                warmer.finish()
            return execute(plan, fence)

        try:
            return run_as_leader(plan, config.election, lead)
        finally:
            if warmer is not None:
                warmer.stop()
            shutil.rmtree(workdir, ignore_errors=True)  # execute removes it; a standby that never led did not
    return execute(plan)


_STEP_ERRORS: dict[str, type[SSHError] | type[SyncError]] = {"ssh": SSHError, "sync": SyncError}


def execute(plan: LaunchPlan, fence: Fence | None = None) -> int:
    """Do what ``plan`` says (see the module docstring); owns and at the end removes
    ``plan.workdir``. Blocks; returns horovodrun's exit code; a SIGTERM before the training
    starts (before the drain's forwarder is installed) raises ``Interrupted`` once everything
    started is stopped.

    Each resource is registered on a ``_CleanUp`` stack as soon as it exists, so the clean-up
    (step 4) undoes exactly what was started, in reverse order, under ``_Shielded``.

    With a ``fence`` (``--leader-election``), it is checked before the hosts are touched, and
    horovodrun's session is handed to it as soon as it exists: a launcher that loses its
    leadership kills it and exits (``elastic.launch.fencing``)."""
    try:
        return _execute(plan, fence)
    except _Terminated as stop:
        raise Interrupted(f"stopped by signal {stop.signum} before the training started", stop.signum) from None


def _execute(plan: LaunchPlan, fence: Fence | None) -> int:
    """``execute``'s body; a SIGTERM in it raises ``_Terminated``."""
    start = time.time()
    Path(plan.ssh_dir).mkdir(parents=True, exist_ok=True)
    outcome = _Outcome()
    with ExitStack() as stack:
        _caught.clear()
        previous_term = signal.signal(signal.SIGTERM, _interrupt)  # clean up, like SIGINT does
        stack.callback(signal.signal, signal.SIGTERM, previous_term)  # restored after the clean-up
        cleanup = stack.enter_context(_CleanUp())
        cleanup.step("removing the work directory", shutil.rmtree, plan.workdir, True)
        cleanup.step("the report", _final_report, plan, start, outcome)

        url = plan.discovery_url
        ours = False
        daemon_ready: float | None = None
        if url and probe(url):
            log.info("using the discovery daemon at %s", url)
        elif plan.daemon is not None:
            daemon = ManagedDaemon(plan.daemon.spec, Path(plan.daemon.log_file),
                                   env={**os.environ, **plan.daemon.env},
                                   ready_timeout=plan.daemon.ready_timeout)
            cleanup.step("stopping the discovery daemon", daemon.stop)
            ours = True
            url = daemon.spawn()
            if not plan.daemon.prepares_hosts:  # its hosts are read below: it must answer first
                daemon_ready = _ready(daemon, plan)
        else:
            raise LaunchError(f"no discovery daemon answers at {url}; give --selector "
                              "(with --namespace/--kubeconfig) to start one")

        ours_prepares = ours and plan.daemon is not None and plan.daemon.prepares_hosts
        if not ours:
            daemon_ready = time.time()
        hosts = [] if ours_prepares else _host_names(fetch_hosts(url))
        if fence is not None:
            fence.check()  # leadership may have ended while the daemon started
        if hosts:
            for step in plan.steps:
                _run_step([*step.argv, "--hosts", ",".join(hosts)], step.what, _STEP_ERRORS[step.kind])
            if not plan.adopt_window:  # with one, an earlier run's workers wait to be adopted
                _reap_earlier_runs(plan, hosts)

        argv = list(plan.horovodrun)
        env = horovodrun_env(plan, os.environ, url)
        env.pop(ELASTIC_LEADER_VALID_UNTIL, None)  # ours alone, never inherited
        if fence is not None and fence.valid_until_file is not None:  # its driver acts only while we lead
            env[ELASTIC_LEADER_VALID_UNTIL] = str(fence.valid_until_file)
        daemon_watch = DaemonWatch(url, plan.poll_interval)  # the one subscription to the daemon
        recorder = outcome.recorder = HostRecorder()
        daemon_watch.subscribe(recorder.see)
        cleanup.step("stopping leftover workers", _reap, plan, recorder)
        cleanup.step("stopping the daemon watch", daemon_watch.stop)  # its last look is recorded
        daemon_watch.start()
        _raise_if_lost()  # one that landed in the daemon's or the steps' forks
        log.info("running: %s", " ".join(argv))
        try:  # its own session; if we die, the kernel tells it (plan.horovodrun_death_signal)
            proc = tied_popen(argv, env=env, stdin=subprocess.DEVNULL, death_signal=plan.horovodrun_death_signal,
                              **_relayed_output(plan))
        except OSError as exc:
            raise LaunchError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        if fence is not None:
            fence.watch(proc.pid)  # its own session: the fence kills the group
        relay = console.Relay(sys.stdout, sys.stderr, width=lambda: shutil.get_terminal_size().columns)
        cleanup.step("closing the output relay", relay.close)  # runs once horovodrun has stopped
        relay.attach(proc.stdout, proc.stderr)  # the ranks' lines, metrics as a live view
        cleanup.step("stopping horovodrun", _stop_if_running, proc)  # the launcher failed while it ran
        _raise_if_lost()  # a signal that landed in the fork's hooks
        if daemon_ready is None:  # spawn first: horovodrun started while our daemon starts
            daemon_ready = _ready(daemon, plan)
        daemon_watch.subscribe(WaitExplainer(url, plan.min_slots).see)  # which pods it waits for, and why
        shortfall = ShortfallTracker(plan.min_slots, plan.ready_timeout)  # why, at the first-world deadline
        daemon_watch.subscribe(shortfall.see)
        monitor = Monitor(plan.events_file, _policies(plan, start, daemon_ready, recorder, relay, shortfall),
                          functools.partial(_act, proc))  # the driver's events, read once
        cleanup.step("stopping the monitor", monitor.stop)
        if fence is not None:  # the first clean-up step: a leader woken past its Lease reaps nothing
            cleanup.step("checking the leadership", fence.check)
        monitor.start()
        _raise_if_lost()  # the forks since (none of ours, but any library's)
        with _SignalForwarder(proc, on_term=lambda: _drain(plan, recorder, proc)) as forwarder:
            while True:
                try:
                    outcome.returncode = proc.wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover - handler forwards instead
                    continue
        if forwarder.received:  # ended by a signal: 128+N, whatever horovodrun made of it
            return exit_for_signal(forwarder.received[0])
        if monitor.stopped is not None:  # a policy ended the job: its exit code
            outcome.returncode = monitor.stopped.exit_code  # what the timeline's summary reports
            outcome.stop_reason = monitor.stopped.reason  # said again as the last line
            return monitor.stopped.exit_code
        return bad_input_exit(exit_code(outcome.returncode), events.read_records(plan.events_file))
    raise AssertionError("unreachable")  # pragma: no cover - the with block returns or raises


@dataclass
class _Outcome:
    """What the report (the last clean-up step) needs from the run."""

    returncode: int | None = None
    recorder: HostRecorder | None = None
    stop_reason: str | None = None  # a policy's Stop: the report's last line


class _CleanUp(ExitStack):
    """Step 4 of the module docstring as a stack: ``step(what, action, *args)`` registers an
    undo as soon as its resource exists; on exit they run in reverse order, each one even when
    one before it failed (logged as a warning), all under ``_Shielded``."""

    def step(self, what: str, action: Callable[..., object], *args: object) -> None:
        def attempt() -> None:
            try:
                action(*args)
            except Exception as exc:  # noqa: BLE001 - one failed step must not skip the others
                log.warning("clean-up: %s failed: %s", what, exc)
        self.callback(attempt)

    def __exit__(self, *exc: object) -> bool:
        with _Shielded() as shield:  # a signal now must not cut the clean-up short
            suppressed = super().__exit__(*exc)  # type: ignore[arg-type]
        if shield.received:
            log.info("signal %d during the clean-up: ignored until it was done", shield.received[0])
        return bool(suppressed)


def _stop_if_running(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        _stop_session(proc)


def _final_report(plan: LaunchPlan, start: float, outcome: _Outcome) -> None:
    """The run's report, once horovodrun has ended (nothing to report otherwise)."""
    if outcome.returncode is None:
        return
    records = events.read_records(plan.events_file)
    _report(plan, start, time.time(), outcome.recorder, bad_input_exit(exit_code(outcome.returncode), records),
            records)
    if outcome.stop_reason:  # why the job was ended, as the launcher's last line
        print(f"elastic-run: error: {outcome.stop_reason}", file=sys.stderr, flush=True)


class _Shielded:
    """While installed, SIGINT/SIGTERM are recorded (``received``) instead of acting: the
    clean-up that runs under it (bounded: the reap and the daemon's stop have deadlines) is
    what stops the job's processes, so it must not be cut short."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict = {}
        self.received: list[int] = []

    def __enter__(self) -> _Shielded:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, lambda signum, _frame: self.received.append(signum))
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


STALL_KILL_GRACE = 10.0


def _policies(plan: LaunchPlan, start: float, daemon_ready: float, recorder: HostRecorder,
              relay: console.Relay, shortfall: ShortfallTracker) -> list[Policy]:
    """What the monitor asks at every round (``elastic.launch.monitor``), from the plan."""
    policies: list[Policy] = [
        PhasePolicy(functools.partial(_marks, start, daemon_ready, recorder, plan.min_slots, relay), plan.min_slots),
        BadInputPolicy(),
    ]
    if plan.stall_timeout:
        policies.append(StallPolicy(plan.stall_timeout, started=time.time()))
    if plan.first_world_timeout:
        policies.append(FirstWorldPolicy.jittered(plan.first_world_timeout, plan.min_slots, time.monotonic(),
                                                  shortfall.verdict))
    return policies


def _act(proc: subprocess.Popen, decision: Decision) -> None:
    """Carry out a policy's decision (in the monitor's thread): a note is logged; a stop says
    why on stderr and stops horovodrun's session (the exit code is read after it ends)."""
    if isinstance(decision, Note):
        log.info("%s", decision.line)
        return
    print(f"elastic-run: error: {decision.reason}", file=sys.stderr, flush=True)
    _stop_session(proc)


def _stop_session(proc: subprocess.Popen) -> None:
    """Stop horovodrun's session: SIGTERM, then SIGKILL after ``STALL_KILL_GRACE`` seconds."""
    for sig, wait in ((signal.SIGTERM, STALL_KILL_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if wait is None:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _reap_ssh(plan: LaunchPlan) -> list[str]:
    """The ssh argv that reaches the hosts: the pinning wrapper once it exists, else ``reap_ssh``."""
    if plan.reap_ssh_wrapper and Path(plan.reap_ssh_wrapper).exists():
        return [plan.reap_ssh_wrapper, "-o", "BatchMode=yes"]
    return list(plan.reap_ssh)


def _last_hosts(recorder: HostRecorder) -> list[str]:
    """The hosts served last; a pod that left the set took its processes with it."""
    snapshots = recorder.snapshots()
    return _host_names(snapshots[-1][1]) if snapshots else []


def _ready(daemon: ManagedDaemon, plan: LaunchPlan) -> float:
    """Wait for the daemon ``spawn()`` started to answer; when it did (unix time)."""
    url = daemon.wait_ready()
    assert plan.daemon is not None
    log.info("started a discovery daemon at %s for %s in %s", url, plan.daemon.spec.selector,
             plan.daemon.spec.namespace)
    return time.time()


def _marks(start: float, daemon_ready: float, recorder: HostRecorder, slots: int,
           relay: console.Relay) -> Marks:
    """The launcher's own times for the phase report (``elastic.launch.phases``): the first
    step is the first progress record the relay saw."""
    served = first_served(recorder.snapshots(), slots,
                          lambda hosts: sum(split_host_slots(line)[1] for line in hosts))
    return Marks(start, daemon_ready, served, relay.first_progress)


def _reap_earlier_runs(plan: LaunchPlan, hosts: Sequence[str]) -> None:
    """Before this run's world starts on ``hosts``: stop what earlier runs of the job left there
    (``elastic.common.reap``, by ``ELASTIC_JOB_ID``; a launcher killed, its node gone). A host
    where that fails is named; its old processes end by their lease."""
    started = time.monotonic()
    failed = reap_hosts(hosts, _reap_ssh(plan), plan.run_id, job_id=plan.job_id)
    log.info("job %s: no process of an earlier run left on %d host(s) (%.1f s)%s", plan.job_id,
             len(hosts) - len(failed), time.monotonic() - started,
             f"; could not check {', '.join(failed)}" if failed else "")


def _drain(plan: LaunchPlan, recorder: HostRecorder, proc: subprocess.Popen) -> None:
    """SIGTERM to elastic-run (a drain, an eviction, an autoscaler's consolidation) while the
    training runs: one SIGTERM to each training process (``elastic.common.reap.term_hosts``:
    it commits, rank 0 writes a checkpoint, it leaves), a wait of at most ``plan.term_grace``
    seconds for them to end, then horovodrun's session is stopped (the clean-up reaps what is
    left). Says what it did on stderr."""
    hosts = _last_hosts(recorder)
    say = functools.partial(print, file=sys.stderr, flush=True)
    say(f"elastic-run: SIGTERM: asking the training on {len(hosts)} host(s) to commit, write a checkpoint "
        f"and leave (up to {plan.term_grace:g} s)")
    started = time.monotonic()
    try:
        failed = term_hosts(hosts, _reap_ssh(plan), plan.run_id, plan.term_grace)
    except Exception as exc:  # noqa: BLE001 - whatever failed, horovodrun must still be stopped
        failed = list(hosts)
        say(f"elastic-run: SIGTERM: could not reach the training: {exc}")
    took = time.monotonic() - started
    if failed:
        say(f"elastic-run: SIGTERM: training still running on {', '.join(failed)} after {took:.1f} s: stopping it")
    else:
        say(f"elastic-run: SIGTERM: the training left on every host in {took:.1f} s; stopping horovodrun")
    _stop_session(proc)


def _reap(plan: LaunchPlan, recorder: HostRecorder) -> None:
    failed = reap_hosts(_last_hosts(recorder), _reap_ssh(plan), plan.run_id)
    if failed:
        log.warning("could not check for leftover training processes on %s", ", ".join(failed))


def _report(plan: LaunchPlan, start: float, end: float, recorder: HostRecorder | None, code: int,
            driver: list[events.Record]) -> None:
    snapshots = recorder.snapshots() if recorder else []
    records = timeline.read_metrics(plan.metrics_file)
    lines = timeline.build_timeline(start, end, snapshots, records, code, driver)
    summary = timeline.summarize(start, end, snapshots, records, code, driver)
    print(timeline.render(lines, summary), file=sys.stderr, flush=True)
    if plan.timeline_file:
        doc = {"start": start, "end": end, "events": [asdict(e) for e in lines],
               "summary": asdict(summary), "hosts": [[t, list(h)] for t, h in snapshots],
               "driver_events": [asdict(r) for r in driver]}
        path = Path(plan.timeline_file)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)
    if plan.plot_file:
        try:
            plot.write_plot(plan.plot_file, plot.plot_data(start, end, snapshots, records, events=driver),
                            title=plan.plot_title)
        except ElasticError as exc:  # the training's exit code stands; the plot is a report
            log.warning("no plot: %s", exc)
    daemon_log = plan.daemon.log_file if plan.daemon is not None and plan.daemon_log_kept else None
    print(outputs_line({"plot": plan.plot_file, "metrics": plan.metrics_file,
                        "timeline": plan.timeline_file, "daemon log": daemon_log}), file=sys.stderr, flush=True)
