"""What ``elastic-run`` will do, decided before anything runs: a pure value.

``make_plan(config, run_id=..., workdir=..., tool=..., python_bin=...) -> LaunchPlan`` turns
the checked ``LaunchConfig`` into every command line, path and environment variable the
launcher uses. It starts nothing, writes nothing and reads no environment: what it needs from
the machine (where the project's commands are, the job's temporary directory, the run id)
comes in as arguments. ``elastic.launch.runner`` executes a plan; ``elastic-run --dry-run``
prints one (``plan_as_dict`` -> JSON) and exits 0.

Two choices can only be made while running and are therefore left to the executor, each
stated in the plan as a rule:

- which daemon: ``discovery_url`` when a daemon answers there, else ``daemon`` is started
  (none given and none answering: ``LaunchError``);
- which hosts ``steps`` run on: those served when the job starts (appended to each step's
  argv as ``--hosts A,B``), none when the daemon is ours and ``daemon.prepares_hosts``
  (its prepare hook runs the same steps per host before serving it).

``horovodrun_env(plan, base, discovery_url)`` -> the environment horovodrun runs in (pure).
Raises ``ConfigError``/``ToolNotFound`` (``ElasticError``s) only from ``tool`` or a bad
``dataset``; everything else was checked when the config was made.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from elastic.common.reap import JOB_ID_ENV, RUN_ID_ENV
from elastic.common.tools import tool as find_tool
from elastic.driver.hvdrun import LAUNCHER_GONE_SIGNAL, REAP_SSH_ENV
from elastic.environment import (
    ELASTIC_ADOPT_WINDOW,
    ELASTIC_ADOPT_WORLD,
    ELASTIC_RENDEZVOUS_ADDRESS,
    ELASTIC_RENDEZVOUS_BIND,
    ELASTIC_RENDEZVOUS_PORT,
    HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS,
)
from elastic.launch.command import HorovodrunOptions, build_horovodrun_command
from elastic.launch.daemon import DaemonSpec
from elastic.launch.events import EVENTS_ENV
from elastic.launch.nccl import NCCL_DEFAULTS
from elastic.leader.elector import ElectionSettings
from elastic.prepare.hook import parse_dataset, prepare_argv
from elastic.ssh.config import SSH_CONFIG_ENV, BootstrapDir
from elastic.worker.lease import DEFAULT_LEASE
from shared.environment import DISCOVERY_URL

LEAVE_GRACE_ENV = HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS
DEFAULT_TERM_GRACE = 25.0  # Kubernetes' default grace is 30 s: 5 s are left for the clean-up


def default_job_id(namespace: str, selector: str | None, discovery_url: str | None,
                   kubeconfig: str | None, command: tuple[str, ...]) -> str:
    """The job identity of a launcher given no ``--job-id``: the same for every retry with the
    same arguments (where the pods are, the training command), 16 hex digits. Pure."""
    key = json.dumps([namespace, selector, discovery_url, kubeconfig, list(command)])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def lease_command(python: str, seconds: float, command: tuple[str, ...], window: float = 0.0) -> list[str]:
    """``command`` under the lease wrapper (``elastic.worker.lease``, with the adoption window
    ``window`` when not 0), or as it is for a lease of 0."""
    if not seconds:
        return list(command)
    adopt = ["--adopt-window", f"{window:g}"] if window else []
    return [python, "-m", "elastic.worker.lease", "--seconds", f"{seconds:g}", *adopt, "--", *command]


@dataclass(frozen=True)
class LaunchConfig:
    """Everything ``run`` needs; built and checked by the CLI."""

    horovodrun: HorovodrunOptions
    command: tuple[str, ...]
    discovery_url: str | None
    selector: str | None = None
    namespace: str = "default"
    kubeconfig: str | None = None
    dataset: str | None = None
    ssh_dir: str | None = None
    metrics_file: str | None = None
    timeline_file: str | None = None
    plot_file: str | None = None
    log_dir: str | None = None
    daemon_ready_timeout: float = 120.0
    poll_interval: float = 0.5
    daemon_env: dict = field(default_factory=dict)
    stall_timeout: float | None = 900.0
    first_world_timeout: float | None = None
    ready_timeout: float = 600.0
    events_file: str | None = None
    leave_grace: float | None = None
    job_id: str | None = None
    lease: float = DEFAULT_LEASE
    term_grace: float = DEFAULT_TERM_GRACE
    run_id: str | None = None  # --run-id: this run's identity (default: a random one)
    election: ElectionSettings | None = None  # --leader-election: stand by until leading
    rendezvous_port: int | None = None  # --rendezvous-port: horovodrun's rendezvous server's own
    rendezvous_address: str | None = None  # --rendezvous-address: what the workers are told
    rendezvous_bind: str | None = None  # --rendezvous-bind: the one address the server listens on
    adopt_window: float = 0.0  # --adopt-window: how long a worker waits for a launcher to adopt it


@dataclass(frozen=True)
class DaemonPlan:
    """The discovery daemon to start when none answers at ``LaunchPlan.discovery_url``.

    env: variables set on top of the launcher's environment for it.
    prepares_hosts: its ``--prepare-cmd`` pins and syncs each host before serving it, so the
        launcher runs no ``steps`` itself.
    """

    spec: DaemonSpec
    log_file: str
    env: Mapping[str, str]
    ready_timeout: float
    prepares_hosts: bool


@dataclass(frozen=True)
class Step:
    """A command run once before horovodrun on the hosts served then (``--hosts A,B`` appended).

    kind: "ssh" or "sync": which error (``SSHError``/``SyncError``) its failure raises.
    """

    what: str
    argv: tuple[str, ...]
    kind: str


@dataclass(frozen=True)
class LaunchPlan:
    """Every decision of one ``elastic-run``; see the module docstring.

    workdir: the job's temporary directory (removed at the end); ssh_dir: pinned keys,
        ssh_config and the ssh wrapper (``--ssh-dir`` or ``workdir/ssh``).
    horovodrun: its argv; env: set on top of the launcher's environment for it;
        env_defaults: set only when unset; path_prepend: put first on its PATH, in order.
    reap_ssh_wrapper / reap_ssh: the ssh command that stops leftover workers at the end: the
        pinning wrapper when it exists by then, else ``reap_ssh``.
    plot_file / plot_title: where the picture of the run goes (``elastic.launch.plot``), if
        anywhere, and its title.
    min_slots: the slots ``--min-np`` needs; fewer served and the executor says which pods
        it waits for, and why (``elastic.launch.waits``).
    daemon_log_kept: the daemon's log is in ``--log-dir`` (kept), not in ``workdir``.
    events_file: where Horovod's driver appends its event records (``elastic.launch.events``;
        ``--events-file`` or ``workdir/driver-events.jsonl``), also in ``env``.
    stall_timeout: seconds without progress before the watchdog stops the job; None: off.
    first_world_timeout: seconds (before jitter) for the driver to form its first world, else
        exit 75 so the workers can be freed (``elastic.launch.gang``); None: wait up to
        ``--elastic-timeout`` as horovodrun does.
    ready_timeout: how long a placed worker may stay unready or unprepared before the
        first-world deadline counts it as failing (exit 69), not as missing capacity
        (``elastic.launch.shortfall``).
    horovodrun_death_signal: the signal the kernel sends horovodrun when the launcher dies
        (``PR_SET_PDEATHSIG``): ``hvdrun.LAUNCHER_GONE_SIGNAL`` for ``elastic.driver.hvdrun``
        (it stops the job, reaps the hosts and exits within seconds), SIGTERM for the plain
        script (Horovod's own shutdown).
    leave_grace: ``--leave-grace`` seconds, passed as ``HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS``
        in ``env``; None leaves Horovod's default.
    job_id: the job's identity (``--job-id``, else ``default_job_id``): every worker carries it
        as ``ELASTIC_JOB_ID`` in ``env``; before its world starts on a host (the prepare hook,
        and the hosts served at the start) the launcher stops every other run of it there.
    lease: seconds a worker lives on without an answer from its driver (``--lease``; the
        training command runs under ``elastic.worker.lease``); 0: off.
    term_grace: on SIGTERM, seconds the training gets to commit, checkpoint and leave before
        the clean-up stops what is left (``--term-grace``).
    adopt_window: ``--adopt-window`` seconds (0: off): a worker whose launcher is gone waits
        this long for another launcher of the job to adopt it (its lease wrapper's window), so
        nothing reaps the job's other runs: not horovodrun when this launcher dies (no
        ``REAP_SSH_ENV``; ``ELASTIC_ADOPT_WINDOW`` in ``env`` makes it exit at once, touching
        nothing), not the prepare hook (no ``--reap-job``); an earlier run's worker is
        adopted or ends at its window, and an adopting horovodrun that cannot adopt waits for
        that before it starts a world.
    """

    run_id: str
    workdir: str
    ssh_dir: str
    discovery_url: str | None
    daemon: DaemonPlan | None
    steps: tuple[Step, ...]
    horovodrun: tuple[str, ...]
    env: Mapping[str, str]
    env_defaults: Mapping[str, str]
    path_prepend: tuple[str, ...]
    reap_ssh_wrapper: str | None
    reap_ssh: tuple[str, ...]
    poll_interval: float
    metrics_file: str | None
    timeline_file: str | None
    plot_file: str | None = None
    plot_title: str = "elastic-run"
    min_slots: int = 1
    daemon_log_kept: bool = False
    events_file: str = ""
    stall_timeout: float | None = None
    first_world_timeout: float | None = None
    ready_timeout: float = 600.0
    horovodrun_death_signal: int = int(signal.SIGTERM)
    leave_grace: float | None = None
    job_id: str = ""
    lease: float = 0.0
    term_grace: float = DEFAULT_TERM_GRACE
    adopt_window: float = 0.0


def for_adoption(plan: LaunchPlan) -> LaunchPlan:
    """The plan of a run that takes over the job's running world instead of starting one (a
    leader that took the job over with ``--adopt-window``): horovodrun adopts the world
    (``ELASTIC_ADOPT_WORLD``: the workers' window). Pure."""
    return replace(plan, env={**plan.env, ELASTIC_ADOPT_WORLD: f"{plan.adopt_window:g}"})


def make_plan(config: LaunchConfig, *, run_id: str, workdir: str,
              tool: Callable[[str], str] = find_tool,
              python_bin: str | None = None) -> LaunchPlan:
    """The plan for ``config`` (pure apart from ``tool``, which looks commands up)."""
    opts = config.horovodrun
    python_bin = python_bin if python_bin is not None else str(Path(sys.executable).parent)
    ssh_dir = config.ssh_dir or os.path.join(workdir, "ssh")
    layout = BootstrapDir(ssh_dir)
    job_id = config.job_id or default_job_id(config.namespace, config.selector, config.discovery_url,
                                             config.kubeconfig, config.command)

    daemon = None
    if config.selector:
        prepare = None
        if opts.ssh_identity_file:
            # with an adoption window an earlier run's workers wait to be adopted: no reap
            reap_job = None if config.adopt_window else (job_id, run_id)
            prepare = shlex.join(prepare_argv(opts.ssh_identity_file, ssh_dir, opts.ssh_port, config.dataset,
                                              reap_job=reap_job))
        spec = DaemonSpec(executable=tool("discovery-daemon"), namespace=config.namespace,
                          selector=config.selector, kubeconfig=config.kubeconfig, prepare_cmd=prepare,
                          admitted_file=os.path.join(workdir, "admitted-uids") if prepare else None)
        daemon = DaemonPlan(spec=spec, log_file=os.path.join(config.log_dir or workdir, "discovery-daemon.log"),
                            env=dict(config.daemon_env), ready_timeout=config.daemon_ready_timeout,
                            prepares_hosts=prepare is not None)

    steps: list[Step] = []
    if opts.ssh_identity_file:
        argv = [tool("ssh-bootstrap"), "hosts", "--identity", opts.ssh_identity_file, "--out", ssh_dir]
        if opts.ssh_port is not None:
            argv += ["--port", str(opts.ssh_port)]
        steps.append(Step("ssh-bootstrap hosts", tuple(argv), "ssh"))  # it locks DIR/.lock itself
    if config.dataset:
        src, dest = parse_dataset(config.dataset)
        argv = [tool("dataset-sync"), src, dest]
        if opts.ssh_identity_file:  # ssh-bootstrap (the step before) wrote it
            argv += ["--ssh-config", str(layout.ssh_config)]
        steps.append(Step("dataset-sync", tuple(argv), "sync"))

    events_file = config.events_file or os.path.join(workdir, "driver-events.jsonl")
    env = dict(opts.env)
    env[RUN_ID_ENV] = run_id
    env[JOB_ID_ENV] = job_id
    env[EVENTS_ENV] = events_file
    path_prepend: tuple[str, ...] = (python_bin,)
    if opts.ssh_identity_file:
        path_prepend = (str(layout.bin_dir), python_bin)
        env[SSH_CONFIG_ENV] = str(layout.ssh_config)

    reap_ssh = ["ssh", "-o", "BatchMode=yes"]
    if opts.ssh_port is not None:
        reap_ssh += ["-p", str(opts.ssh_port)]
    if opts.ssh_identity_file:
        reap_ssh += ["-i", opts.ssh_identity_file]
    wrapper = str(layout.ssh_wrapper) if opts.ssh_identity_file else None
    if config.adopt_window:
        # for hvdrun, should the launcher die: leave the workers to the launcher that adopts them
        env[ELASTIC_ADOPT_WINDOW] = f"{config.adopt_window:g}"
    else:
        # for hvdrun, should the launcher die: the first candidate that exists by then
        env[REAP_SSH_ENV] = json.dumps(([[wrapper, "-o", "BatchMode=yes"]] if wrapper else []) + [reap_ssh])
    if config.leave_grace is not None:
        env[LEAVE_GRACE_ENV] = repr(float(config.leave_grace))
    if config.rendezvous_port is not None:
        env[ELASTIC_RENDEZVOUS_PORT] = str(config.rendezvous_port)
    if config.rendezvous_address is not None:
        env[ELASTIC_RENDEZVOUS_ADDRESS] = config.rendezvous_address
    if config.rendezvous_bind is not None:
        env[ELASTIC_RENDEZVOUS_BIND] = config.rendezvous_bind
    hvdrun = tuple(opts.launcher[-2:]) == ("-m", "elastic.driver.hvdrun")

    return LaunchPlan(
        run_id=run_id, workdir=workdir, ssh_dir=ssh_dir,
        discovery_url=config.discovery_url, daemon=daemon, steps=tuple(steps),
        horovodrun=tuple(build_horovodrun_command(
            # "python" as the worker's PATH finds it (the exported PATH puts this venv first where
            # it exists; a container pod has its own, /opt/venv): never this launcher's path
            opts, lease_command("python", config.lease, config.command, config.adopt_window))),
        env=env, env_defaults={"PYTHONUNBUFFERED": "1", **NCCL_DEFAULTS}, path_prepend=path_prepend,
        reap_ssh_wrapper=wrapper,
        reap_ssh=tuple(reap_ssh), poll_interval=config.poll_interval,
        metrics_file=config.metrics_file, timeline_file=config.timeline_file,
        plot_file=config.plot_file, plot_title=f"elastic-run: {shlex.join(config.command)[:80]}",
        min_slots=opts.min_np,
        daemon_log_kept=daemon is not None and config.log_dir is not None,
        events_file=events_file, stall_timeout=config.stall_timeout,
        first_world_timeout=config.first_world_timeout, ready_timeout=config.ready_timeout,
        horovodrun_death_signal=int(LAUNCHER_GONE_SIGNAL if hvdrun else signal.SIGTERM),
        leave_grace=config.leave_grace, job_id=job_id, lease=config.lease, term_grace=config.term_grace,
        adopt_window=config.adopt_window,
    )


def horovodrun_env(plan: LaunchPlan, base: Mapping[str, str], discovery_url: str) -> dict[str, str]:
    """The environment horovodrun runs in: ``base``, then ``plan.env``, ``DISCOVERY_URL``,
    ``plan.path_prepend`` before PATH, and ``plan.env_defaults`` where still unset."""
    env = dict(base)
    env.pop(ELASTIC_ADOPT_WORLD, None)  # only an adopting plan's horovodrun adopts
    env.update(plan.env)
    env[DISCOVERY_URL] = discovery_url
    env["PATH"] = os.pathsep.join([*plan.path_prepend, env.get("PATH", "")])
    for name, value in plan.env_defaults.items():
        env.setdefault(name, value)
    return env


def plan_as_dict(plan: LaunchPlan) -> dict:
    """The plan as JSON-ready data (what ``elastic-run --dry-run`` prints)."""
    return asdict(plan)
