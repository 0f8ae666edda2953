"""``elastic-run``: run an elastic Horovod job with discovery, SSH and data wired up.

    elastic-run [options] -- python -m training.mnist --data-dir /data/mnist ...

``main(argv) -> int``: parses flags (each also read from an environment variable), builds a
``LaunchConfig`` and runs it (see ``elastic.launch.runner``). With ``--dry-run`` it prints the
plan (``elastic.launch.plan``: every command line, path and variable the run would use) as
JSON on stdout and exits 0 without starting anything. The exit code is the training's
(horovodrun's); a bad flag or a failed preparation step prints ``error: <one line>`` and
exits 2 (usage) or 1.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import socket
import sys
import tempfile
import uuid
from collections.abc import Sequence

from elastic.common.cli import env_int
from elastic.common.tools import tool
from elastic.driver.rendezvous_endpoint import parse_address, parse_bind, parse_port
from elastic.environment import (
    ELASTIC_ADOPT_WINDOW,
    ELASTIC_DATASET,
    ELASTIC_DISCOVERY_MODE,
    ELASTIC_JOB_ID,
    ELASTIC_LEADER_ELECTION,
    ELASTIC_LEADER_IDENTITY,
    ELASTIC_LEADER_LEASE,
    ELASTIC_LEASE,
    ELASTIC_LEAVE_GRACE,
    ELASTIC_LOG_DIR,
    ELASTIC_MAX_NP,
    ELASTIC_METRICS_FILE,
    ELASTIC_MIN_NP,
    ELASTIC_NETWORK_INTERFACE,
    ELASTIC_PLOT,
    ELASTIC_RENDEZVOUS_ADDRESS,
    ELASTIC_RENDEZVOUS_BIND,
    ELASTIC_RENDEZVOUS_PORT,
    ELASTIC_SSH_IDENTITY,
    ELASTIC_SSH_PORT,
    ELASTIC_STALL_TIMEOUT,
    ELASTIC_TERM_GRACE,
    ELASTIC_TIMEOUT,
)
from elastic.errors import ConfigError, ElasticError
from elastic.launch.command import HorovodrunOptions
from elastic.launch.plan import DEFAULT_TERM_GRACE, LaunchConfig, default_job_id, make_plan, plan_as_dict
from elastic.launch.plot import check_plot_path
from elastic.launch.runner import run
from elastic.leader.elector import ElectionSettings
from elastic.leader.rules import Timings, check_identity
from elastic.prepare.hook import parse_dataset
from elastic.worker.lease import DEFAULT_LEASE, MAX_LEASE, MIN_LEASE, check_seconds, check_window
from shared.argparser import OneLineParser
from shared.environment import DISCOVERY_NAMESPACE, DISCOVERY_PORT, DISCOVERY_SELECTOR, DISCOVERY_URL
from shared.exitcodes import EXIT_FENCED, EXIT_OK
from shared.runner import run_main

DEFAULT_PORT = 8642


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="elastic-run",
        usage="elastic-run [options] -- COMMAND [ARGS...]",
        description="Run COMMAND as an elastic Horovod job: find or start the discovery daemon, "
                    "check and pin the hosts' SSH keys, sync the dataset, run horovodrun with "
                    "--host-discovery-script discover-hosts, print a timeline at the end. "
                    "Exits with the training's exit code.")
    g = p.add_argument_group("world size")
    g.add_argument("--min-np", type=int, default=None, help="fewest processes (ELASTIC_MIN_NP; default 1)")
    g.add_argument("--max-np", type=int, default=None, help="most processes (ELASTIC_MAX_NP)")
    g.add_argument("--np", type=int, default=None, help="processes to start with (default: --min-np)")
    g.add_argument("--slots-per-host", type=int, default=None,
                   help="force this many slots per host (default: what discovery says)")
    g = p.add_argument_group("elasticity")
    g.add_argument("--elastic-timeout", type=int, default=None,
                   help="seconds to wait for --min-np slots (ELASTIC_TIMEOUT; default 600)")
    g.add_argument("--reset-limit", type=int, default=None, help="most resets before failing (default: none)")
    g.add_argument("--blacklist-cooldown-range", type=int, nargs=2, default=[10, 60], metavar=("LOW", "HIGH"),
                   help="seconds a failed host stays blacklisted (default 10 60), so one that comes back is used again")
    g.add_argument("--start-timeout", type=int, default=None, help="seconds for workers to start")
    g.add_argument("--leave-grace", default=None, metavar="SECONDS",
                   help="how long a host that left discovery (pod NotReady, deleted, gone) may keep its "
                        "workers in the world before the driver aborts its peers' collectives and ends "
                        "them: long enough for a graceful delete to commit and leave, short for hosts that "
                        "vanish without a word (HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS for horovodrun; "
                        "ELASTIC_LEAVE_GRACE; default: Horovod's, 5)")
    g = p.add_argument_group("launcher loss (docs/architecture.md, \"The launcher\")")
    g.add_argument("--job-id", default=None, metavar="JOB",
                   help="the job's identity, the same for every retry of the job: a launcher stops whatever "
                        "an earlier run of JOB left on a host before its own world starts there "
                        "(ELASTIC_JOB_ID; letters, digits and '-', at most 63; default: derived from the "
                        "pods' namespace, selector or daemon, the kubeconfig and the training command)")
    g.add_argument("--run-id", default=None, metavar="RUN",
                   help="this run's identity, different for every retry (letters, digits and '-', at most "
                        "63; default: a random one); deploy/ gives the launcher pod's uid, which the "
                        "discovery sidecar's prepare hook keeps (--keep-run) while it stops the job's other runs")
    g.add_argument("--lease", default=None, metavar="SECONDS",
                   help="a worker whose driver has not answered for this long, or whose ssh session is "
                        "gone, ends its processes (elastic.worker.lease): a lost launcher leaves no "
                        f"world behind (ELASTIC_LEASE; 0: off, else {MIN_LEASE:g}..{MAX_LEASE:g}; "
                        f"default {DEFAULT_LEASE:g}: the 6 s driver stall the job survives, plus 2 s)")
    g.add_argument("--term-grace", default=None, metavar="SECONDS",
                   help="on SIGTERM (drain, eviction), how long the training gets to commit, write a "
                        "checkpoint and leave before elastic-run stops what is left; keep it below the "
                        f"pod's grace (ELASTIC_TERM_GRACE; default {DEFAULT_TERM_GRACE:g})")
    g = p.add_argument_group("leader election: two launchers of one job (docs/architecture.md, \"Launcher failover\")")
    g.add_argument("--leader-election", action="store_true", default=None,
                   help="launchers of one job (the same --job-id) elect one leader through a coordination.k8s.io "
                        "Lease; the others stand by, warm, and one of them leads when the leader is lost; a leader "
                        f"that lost its Lease kills its own processes and exits {EXIT_FENCED} "
                        f"({ELASTIC_LEADER_ELECTION}=1)")
    g.add_argument("--leader-lease", default=None, metavar="NAMESPACE/NAME",
                   help=f"the Lease ({ELASTIC_LEADER_LEASE}; default: the pods' namespace, elastic-run-<job id>)")
    g.add_argument("--leader-identity", default=None, metavar="ID",
                   help=f"this launcher's name in the Lease ({ELASTIC_LEADER_IDENTITY}; default: host name, pid "
                        "and a random suffix; in a pod the host name is the pod's)")
    g.add_argument("--leader-lease-duration", default=None, metavar="SECONDS",
                   help=f"how long a standby waits after the Lease last changed before it takes it over "
                        f"(default {DEFAULT_TIMINGS.lease_duration:g})")
    g.add_argument("--leader-renew-deadline", default=None, metavar="SECONDS",
                   help=f"how long a leader may fail to renew before it fences itself; shorter than the lease "
                        f"duration (default {DEFAULT_TIMINGS.renew_deadline:g})")
    g.add_argument("--leader-retry-period", default=None, metavar="SECONDS",
                   help=f"how often the Lease is read and renewed (default {DEFAULT_TIMINGS.retry_period:g})")
    g.add_argument("--rendezvous-port", default=None, metavar="PORT",
                   help=f"the port horovodrun's rendezvous server listens on, the same for every launcher of the "
                        f"job ({ELASTIC_RENDEZVOUS_PORT}; default: a free one, Horovod's)")
    g.add_argument("--rendezvous-address", default=None, metavar="HOST",
                   help=f"the address the workers are told to reach it at, one that follows the leading launcher "
                        f"(a Service) ({ELASTIC_RENDEZVOUS_ADDRESS}; default: this launcher's, Horovod's)")
    g.add_argument("--rendezvous-bind", default=None, metavar="ADDRESS",
                   help=f"the one IPv4 address of this host it listens on, this launcher's own, as a pod's IP is "
                        f"(needs --rendezvous-port; {ELASTIC_RENDEZVOUS_BIND}; default: every address; the workers "
                        f"are told it unless --rendezvous-address)")
    g.add_argument("--adopt-window", default=None, metavar="SECONDS",
                   help=f"a worker whose launcher is gone trains on this long, waiting for another launcher of "
                        f"the job to adopt it; a launcher that takes the job over adopts the running world "
                        f"instead of starting it again (needs --leader-election, --rendezvous-port and a "
                        f"--lease; {ELASTIC_ADOPT_WINDOW}; default 0: off)")
    g = p.add_argument_group("hosts")
    g.add_argument("--ssh-port", type=int, default=None, help="sshd port of every host (ELASTIC_SSH_PORT)")
    g.add_argument("--ssh-identity-file", default=None, help="the job's private key (ELASTIC_SSH_IDENTITY)")
    g.add_argument("--ssh-dir", default=None,
                   help="where pinned host keys and ssh_config go (default: a temporary directory)")
    g.add_argument("--network-interface", action="append", default=None, metavar="NIC",
                   help="NIC(s) for Horovod's traffic, repeat or comma-separate (ELASTIC_NETWORK_INTERFACE)")
    g.add_argument("--dataset", default=None, metavar="SRC:DEST",
                   help="sync SRC to DEST on every host, also hosts that join later (ELASTIC_DATASET)")
    g = p.add_argument_group("discovery")
    g.add_argument("--discovery-url", default=None,
                   help=f"a running discovery daemon (DISCOVERY_URL; default http://127.0.0.1:{DEFAULT_PORT} "
                        "unless --selector is given)")
    g.add_argument("--selector", default=None,
                   help="start a discovery daemon for pods with these labels (DISCOVERY_SELECTOR)")
    g.add_argument("--namespace", default=None, help="namespace of the pods (DISCOVERY_NAMESPACE; default 'default')")
    g.add_argument("--kubeconfig", default=None, help="kubeconfig for the daemon (default: its own lookup)")
    g.add_argument("--discovery-mode", choices=("push", "script"), default=None,
                   help="push: Horovod's driver long-polls the daemon in-process (no process per "
                        "poll, changes in milliseconds); script: horovodrun runs discover-hosts "
                        "every second (ELASTIC_DISCOVERY_MODE; default push)")
    g = p.add_argument_group("training")
    g.add_argument("-x", "--env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="environment variable for the training processes (NAME alone: this one's value)")
    g.add_argument("--metrics-file", default=None,
                   help="the training's JSON-lines metrics file, read for the timeline (ELASTIC_METRICS_FILE)")
    g.add_argument("--timeline-file", default=None, help="also write the timeline as JSON here")
    g.add_argument("--plot", default=None, metavar="FILE",
                   help="draw the run into FILE (.png or .svg): world size, samples/s, loss, host joins/leaves, "
                        "resets, epochs (ELASTIC_PLOT)")
    g.add_argument("--log-dir", default=None, metavar="DIR",
                   help="keep the discovery daemon's log (with the prepare hook's output) in DIR (ELASTIC_LOG_DIR; "
                        "default: removed at the end)")
    g.add_argument("--events-file", default=None,
                   help="where the Horovod driver appends its event records (JSON lines: time, kind, "
                        "detail; see elastic/launch/timeline.py; default: a temporary file)")
    g.add_argument("--stall-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop the job when no rank committed or made progress for this long, "
                        "saying what each was last seen doing; 0 turns it off "
                        "(ELASTIC_STALL_TIMEOUT; default 900)")
    g.add_argument("--first-world-timeout", type=float, default=None, metavar="SECONDS",
                   help="exit 75 (no capacity: try again later) when no world of --min-np slots formed "
                        "within this long (plus up to 25%% jitter), so that a capped pool's workers can "
                        "be freed for another job; default off: wait up to --elastic-timeout. Only a lack of "
                        "capacity gives 75: workers that have their place but crash-loop, cannot start, fail "
                        "their preparation or stay unready past --ready-timeout give 69 (a counted failure)")
    g.add_argument("--ready-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="with --first-world-timeout: how long a worker that has its place (a node) may stay not "
                        "ready or unprepared before it counts as failing, not as waiting for capacity "
                        "(default: %(default)g)")
    g.add_argument("--verbose", action="store_true", help="horovodrun --verbose and debug logs")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (commands, paths, environment) as JSON and exit 0 without starting anything")
    return p


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _parse_env(items: Sequence[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in os.environ:
                raise ConfigError(f"-x {name}: no such variable in the environment (use NAME=VALUE)")
            value = os.environ[name]
        env[name] = value
    return env


MAX_LEAVE_GRACE = 3600.0


def parse_leave_grace(raw: str, name: str = "--leave-grace") -> float:
    """``--leave-grace`` -> seconds: a number from 0 to ``MAX_LEAVE_GRACE``; ConfigError naming it."""
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not 0 <= value <= MAX_LEAVE_GRACE:  # also refuses nan
        raise ConfigError(f"{name} must be between 0 and {MAX_LEAVE_GRACE:g} seconds, got {raw!r}")
    return value


_JOB_ID = re.compile(r"^[A-Za-z0-9-]{1,63}$")
MAX_TERM_GRACE = 3600.0


def parse_job_id(raw: str, name: str = "--job-id") -> str:
    """``--job-id`` (or ``--run-id``) as given, or ConfigError naming it (it goes into a shell
    pattern on the hosts)."""
    if not _JOB_ID.match(raw):
        raise ConfigError(f"{name} must be 1 to 63 letters, digits or '-', got {raw!r}")
    return raw


def parse_lease(raw: str, name: str = "--lease") -> float:
    """``--lease`` -> seconds (``elastic.worker.lease.check_seconds``); ConfigError naming it."""
    try:
        return check_seconds(float(raw))
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}" if "lease" in str(exc) else
                          f"{name} must be a number of seconds, got {raw!r}") from None


def parse_adopt_window(raw: str, name: str = "--adopt-window") -> float:
    """The adoption window: 0 (off) or the lease wrapper's range of seconds; ConfigError naming
    ``name`` otherwise."""
    try:
        return check_window(float(raw))
    except ValueError as exc:
        detail = str(exc) if "adoption window" in str(exc) else f"must be a number of seconds, got {raw!r}"
        raise ConfigError(f"{name}: {detail}") from None


def parse_term_grace(raw: str, name: str = "--term-grace") -> float:
    """``--term-grace`` -> seconds in (0, ``MAX_TERM_GRACE``]; ConfigError naming it."""
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= MAX_TERM_GRACE:
        raise ConfigError(f"{name} must be more than 0 and at most {MAX_TERM_GRACE:g} seconds, got {raw!r}")
    return value


DEFAULT_TIMINGS = Timings()
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _seconds(raw: str | None, name: str, default: float) -> float:
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None


def election_from_args(args: argparse.Namespace, namespace: str, job_id: str,
                       kubeconfig: str | None) -> ElectionSettings | None:
    """``--leader-election`` and its settings (None when off); ConfigError naming a bad one."""
    raw_on = os.environ.get(ELASTIC_LEADER_ELECTION, "")
    if raw_on not in ("", "0", "1", "true", "false"):
        raise ConfigError(f"{ELASTIC_LEADER_ELECTION} must be 1 or 0, got {raw_on!r}")
    if not (args.leader_election or raw_on in ("1", "true")):
        return None
    raw, env_name = _flag_or_env(args.leader_lease, ELASTIC_LEADER_LEASE)
    if raw is None:
        lease_ns, lease_name = namespace, f"elastic-run-{job_id.lower()}"
    else:
        lease_ns, sep, lease_name = raw.partition("/")
        if not sep:
            raise ConfigError(f"{env_name or '--leader-lease'} must be NAMESPACE/NAME, got {raw!r}")
    for value, what in ((lease_ns, "namespace"), (lease_name, "name")):
        if not _K8S_NAME.match(value):
            raise ConfigError(f"the leader Lease's {what} must be a lowercase RFC 1123 label, got {value!r}")
    raw, env_name = _flag_or_env(args.leader_identity, ELASTIC_LEADER_IDENTITY)
    identity = raw or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        check_identity(identity)
        timings = Timings(
            lease_duration=_seconds(args.leader_lease_duration, "--leader-lease-duration",
                                    DEFAULT_TIMINGS.lease_duration),
            renew_deadline=_seconds(args.leader_renew_deadline, "--leader-renew-deadline",
                                    DEFAULT_TIMINGS.renew_deadline),
            retry_period=_seconds(args.leader_retry_period, "--leader-retry-period", DEFAULT_TIMINGS.retry_period))
    except ValueError as exc:
        raise ConfigError(f"--leader-election: {exc}") from None
    return ElectionSettings(lease_ns, lease_name, identity, timings, kubeconfig)


def _flag_or_env(value: str | None, env: str) -> tuple[str | None, str]:
    """The flag's value and its name, else the variable's (if set and not empty)."""
    if value is not None:
        return value, ""
    return os.environ.get(env) or None, env


def config_from_args(args: argparse.Namespace, command: list[str]) -> LaunchConfig:
    """Check the flags and environment; ConfigError names the first bad value."""
    if not command:
        raise ConfigError("no training command given: elastic-run [options] -- COMMAND ...")
    min_np = args.min_np if args.min_np is not None else (env_int(ELASTIC_MIN_NP) or 1)
    max_np = args.max_np if args.max_np is not None else env_int(ELASTIC_MAX_NP)
    timeout = args.elastic_timeout if args.elastic_timeout is not None else (env_int(ELASTIC_TIMEOUT) or 600)
    ssh_port = args.ssh_port if args.ssh_port is not None else env_int(ELASTIC_SSH_PORT)
    identity = args.ssh_identity_file or os.environ.get(ELASTIC_SSH_IDENTITY) or None
    if identity is not None:
        identity = os.path.abspath(identity)
        if not os.path.isfile(identity):
            raise ConfigError(f"--ssh-identity-file {identity}: no such file")
    nics_raw = args.network_interface or [os.environ.get(ELASTIC_NETWORK_INTERFACE, "")]
    nics = tuple(n for item in nics_raw for n in item.split(",") if n)
    dataset = args.dataset or os.environ.get(ELASTIC_DATASET) or None
    if dataset:
        src, dest = parse_dataset(dataset)
        if not os.path.isdir(src):
            raise ConfigError(f"--dataset source {src}: no such directory")
        dataset = f"{os.path.abspath(src)}:{dest}"
    selector = args.selector or os.environ.get(DISCOVERY_SELECTOR) or None
    namespace = args.namespace or os.environ.get(DISCOVERY_NAMESPACE) or "default"
    url = args.discovery_url or os.environ.get(DISCOVERY_URL) or None
    if url is None and selector is None:
        url = f"http://127.0.0.1:{os.environ.get(DISCOVERY_PORT) or DEFAULT_PORT}"
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        raise ConfigError(f"--kubeconfig {args.kubeconfig}: no such file")
    mode = args.discovery_mode or os.environ.get(ELASTIC_DISCOVERY_MODE) or "push"
    if mode not in ("push", "script"):
        raise ConfigError(f"ELASTIC_DISCOVERY_MODE must be push or script, got {mode!r}")
    stall = args.stall_timeout
    if stall is None:
        raw = os.environ.get(ELASTIC_STALL_TIMEOUT)
        try:
            stall = float(raw) if raw else 900.0
        except ValueError:
            raise ConfigError(f"ELASTIC_STALL_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if not stall >= 0:
        raise ConfigError(f"--stall-timeout must be 0 (off) or a positive number of seconds, got {stall}")
    first_world = args.first_world_timeout
    if first_world is not None and not first_world > 0:
        raise ConfigError(f"--first-world-timeout must be a positive number of seconds, got {first_world:g}")
    if not args.ready_timeout > 0:
        raise ConfigError(f"--ready-timeout must be a positive number of seconds, got {args.ready_timeout:g}")
    leave_grace = None
    if args.leave_grace is not None:
        leave_grace = parse_leave_grace(args.leave_grace)
    elif os.environ.get(ELASTIC_LEAVE_GRACE):
        leave_grace = parse_leave_grace(os.environ[ELASTIC_LEAVE_GRACE], ELASTIC_LEAVE_GRACE)
    raw, env_name = _flag_or_env(args.job_id, ELASTIC_JOB_ID)
    job_id = parse_job_id(raw, env_name or "--job-id") if raw is not None else None
    run_id = parse_job_id(args.run_id, "--run-id") if args.run_id is not None else None
    if run_id is not None and run_id == job_id:
        raise ConfigError(f"--run-id must differ from the job's id, got {run_id!r} for both")
    raw, env_name = _flag_or_env(args.lease, ELASTIC_LEASE)
    lease = parse_lease(raw, env_name or "--lease") if raw is not None else DEFAULT_LEASE
    raw, env_name = _flag_or_env(args.term_grace, ELASTIC_TERM_GRACE)
    term_grace = parse_term_grace(raw, env_name or "--term-grace") if raw is not None else DEFAULT_TERM_GRACE
    raw, env_name = _flag_or_env(args.rendezvous_port, ELASTIC_RENDEZVOUS_PORT)
    rendezvous_port = parse_port(raw, env_name or "--rendezvous-port") if raw is not None else None
    raw, env_name = _flag_or_env(args.rendezvous_address, ELASTIC_RENDEZVOUS_ADDRESS)
    rendezvous_address = parse_address(raw, env_name or "--rendezvous-address") if raw is not None else None
    raw, env_name = _flag_or_env(args.rendezvous_bind, ELASTIC_RENDEZVOUS_BIND)
    rendezvous_bind = parse_bind(raw, env_name or "--rendezvous-bind") if raw is not None else None
    if rendezvous_bind is not None and rendezvous_port is None:
        raise ConfigError("--rendezvous-bind needs --rendezvous-port: it names where the fixed port is listened on")
    raw, env_name = _flag_or_env(args.adopt_window, ELASTIC_ADOPT_WINDOW)
    adopt_window = parse_adopt_window(raw, env_name or "--adopt-window") if raw is not None else 0.0
    if adopt_window and rendezvous_port is None:
        raise ConfigError("--adopt-window needs --rendezvous-port: the workers ask to be adopted there")
    if adopt_window and not lease:
        raise ConfigError("--adopt-window needs a --lease: the lease wrapper keeps the workers through the window")
    options = HorovodrunOptions(
        discovery_script=tool("discover-hosts"),
        min_np=min_np, max_np=max_np, np=args.np, slots_per_host=args.slots_per_host,
        elastic_timeout=timeout, reset_limit=args.reset_limit,
        cooldown_range=tuple(args.blacklist_cooldown_range),
        ssh_port=ssh_port, ssh_identity_file=identity, network_interfaces=nics,
        start_timeout=args.start_timeout, env=_parse_env(args.env),
        horovodrun=tool("horovodrun"), verbose=args.verbose,
        launcher=(sys.executable, "-m", "elastic.driver.hvdrun") if mode == "push" else (),
    )
    metrics = args.metrics_file or os.environ.get(ELASTIC_METRICS_FILE) or None
    plot_file = args.plot or os.environ.get(ELASTIC_PLOT) or None
    if plot_file:
        plot_file = check_plot_path(plot_file)
    log_dir = args.log_dir or os.environ.get(ELASTIC_LOG_DIR) or None
    if log_dir:
        log_dir = os.path.abspath(log_dir)  # made by the run (the daemon's log goes there)
        if not (os.path.isdir(log_dir) or (not os.path.exists(log_dir) and os.path.isdir(os.path.dirname(log_dir)))):
            raise ConfigError(f"--log-dir {log_dir}: not a directory, and its parent is not one either")
    kubeconfig = os.path.abspath(args.kubeconfig) if args.kubeconfig else None
    election = election_from_args(args, namespace, job_id or default_job_id(namespace, selector, url, kubeconfig,
                                                                            tuple(command)), kubeconfig)
    if adopt_window and election is None:
        raise ConfigError("--adopt-window needs --leader-election: only a launcher that takes the job over adopts")
    return LaunchConfig(
        horovodrun=options, command=tuple(command), discovery_url=url, selector=selector,
        namespace=namespace, kubeconfig=kubeconfig, election=election,
        dataset=dataset, ssh_dir=os.path.abspath(args.ssh_dir) if args.ssh_dir else None,
        metrics_file=metrics, timeline_file=args.timeline_file, plot_file=plot_file, log_dir=log_dir,
        stall_timeout=stall or None, first_world_timeout=first_world, ready_timeout=args.ready_timeout,
        events_file=os.path.abspath(args.events_file) if args.events_file else None,
        leave_grace=leave_grace, job_id=job_id, lease=lease, term_grace=term_grace, run_id=run_id,
        rendezvous_port=rendezvous_port, rendezvous_address=rendezvous_address, rendezvous_bind=rendezvous_bind,
        adopt_window=adopt_window,
    )


def main(argv: Sequence[str] | None = None) -> int:
    own, command = _split(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(own)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="elastic-run: %(message)s")
    if args.dry_run:
        return run_main("elastic-run", lambda: _print_plan(config_from_args(args, command)),
                        usage=ConfigError, failure=ElasticError)
    return run_main("elastic-run", lambda: run(config_from_args(args, command)),
                    usage=ConfigError, failure=ElasticError, interrupted="interrupted before the training started")


def _print_plan(config: LaunchConfig) -> int:
    """Print the plan; its workdir is where a run would put its temporary directory."""
    workdir = os.path.join(tempfile.gettempdir(), "elastic-run-DRYRUN")
    plan = make_plan(config, run_id=config.run_id or uuid.uuid4().hex, workdir=workdir)
    print(json.dumps(plan_as_dict(plan), indent=2))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
