"""The launcher's steps, in order (``run(config) -> exit code``; blocks until the job ends).

1. discovery: use the daemon answering at ``config.discovery_url``; else, with a selector,
   start one (``ManagedDaemon``) whose ``--prepare-cmd`` pins each new host's SSH key and
   syncs the dataset to it before it is served; else ``LaunchError``;
2. the hosts served now: ``ssh-bootstrap hosts`` (checks them, pins their keys) and, with a
   dataset, ``dataset-sync`` to them. Skipped when there are none yet, and when the daemon is
   ours with the prepare hook: it serves only hosts the hook has prepared. An external
   daemon's own hook (the launcher pod in deploy/) covers hosts that come later;
3. horovodrun (``build_horovodrun_command``; by default through ``elastic.launch.hvdrun``,
   whose driver long-polls the daemon in-process instead of running the script every
   second) in its own session, with ``DISCOVERY_URL`` set
   for ``discover-hosts`` and, with an identity, ssh-bootstrap's pinning ``ssh`` wrapper first
   on its PATH (``elastic.ssh.config.horovodrun_env``: checks the job's pinned host keys, keeps
   them out of ``~/.ssh/known_hosts``); SIGINT/SIGTERM to the launcher are forwarded to it;
   the driver's events go to a file of ours (``events``), which the stall watchdog follows:
   when no rank made progress for ``config.stall_timeout`` seconds it prints what each was
   last seen doing and stops horovodrun's whole session (exit code 1);
4. at the end (always): the host recorder is stopped; the job's processes left on the hosts
   it saw are stopped (``elastic.launch.reap``: workers carry ``ELASTIC_RUN_ID``; horovodrun
   stopped by a signal leaves them running otherwise; hosts still served are checked); a daemon we started is stopped; the
   timeline is printed to stderr (and written as JSON to ``config.timeline_file`` if given).

The exit code is horovodrun's (128+N when it died of signal N). Errors before horovodrun
starts raise ``ElasticError`` subclasses; the CLI turns them into one line.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from elastic.launch import events, timeline
from elastic.errors import LaunchError, SSHError, SyncError
from elastic.launch.command import HorovodrunOptions, build_horovodrun_command, horovodrun_environment
from elastic.launch.daemon import DaemonSpec, ManagedDaemon, fetch_hosts, probe
from elastic.launch.reap import RUN_ID_ENV, reap_hosts
from elastic.launch.prepare import parse_dataset, prepare_argv
from elastic.launch.tools import tool
from elastic.launch.stall import Watchdog
from elastic.launch.watch import HostRecorder
from elastic.ssh.config import SSH_CONFIG_ENV, BootstrapDir

log = logging.getLogger("elastic.run")


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
    daemon_ready_timeout: float = 120.0
    poll_interval: float = 0.5
    daemon_env: dict = field(default_factory=dict)
    stall_timeout: float | None = 900.0
    events_file: str | None = None


def _host_names(lines: Sequence[str]) -> list[str]:
    return [line.rpartition(":")[0] or line for line in lines]


def _run_step(argv: list[str], what: str, error: type[LaunchError] | type[SSHError] | type[SyncError]) -> None:
    """Run a helper command with its output passed through to stderr."""
    log.info("%s: %s", what, " ".join(argv))
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0:
        raise error(f"{what} failed with exit code {proc.returncode} (see its output above)")


class _SignalForwarder:
    """While installed, SIGINT/SIGTERM to this process go to the child instead."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, proc: subprocess.Popen):
        self._proc = proc
        self._previous: dict = {}
        self.received: list[int] = []

    def __enter__(self) -> "_SignalForwarder":
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _forward(self, signum, _frame) -> None:
        self.received.append(signum)
        if self._proc.poll() is None:
            try:
                self._proc.send_signal(signum)
            except ProcessLookupError:
                pass


class Interrupted(LaunchError):
    """SIGTERM arrived before horovodrun was started (what was started is stopped)."""


def _interrupt(signum, _frame) -> None:
    raise Interrupted(f"stopped by signal {signum} before the training started")


def exit_code(returncode: int) -> int:
    """A Popen returncode as a shell exit code (signals as 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def run(config: LaunchConfig) -> int:
    """Run the job; see the module docstring. Blocks; returns horovodrun's exit code."""
    start = time.time()
    run_id = uuid.uuid4().hex
    workdir = Path(tempfile.mkdtemp(prefix="elastic-run-"))
    ssh_dir = Path(config.ssh_dir) if config.ssh_dir else workdir / "ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    daemon: ManagedDaemon | None = None
    recorder: HostRecorder | None = None
    returncode: int | None = None
    watchdog: Watchdog | None = None
    events_file = Path(config.events_file) if config.events_file else workdir / "driver-events.jsonl"
    previous_term = signal.signal(signal.SIGTERM, _interrupt)  # clean up, like SIGINT does
    try:
        url = config.discovery_url
        opts = config.horovodrun
        prepare = None
        if url and probe(url):
            log.info("using the discovery daemon at %s", url)
        elif config.selector:
            if opts.ssh_identity_file:
                prepare = " ".join(_quote(a) for a in prepare_argv(
                    opts.ssh_identity_file, str(ssh_dir), opts.ssh_port, config.dataset))
            spec = DaemonSpec(executable=tool("discovery-daemon"), namespace=config.namespace,
                              selector=config.selector, kubeconfig=config.kubeconfig, prepare_cmd=prepare)
            daemon = ManagedDaemon(spec, workdir / "discovery-daemon.log",
                                   env={**os.environ, **config.daemon_env},
                                   ready_timeout=config.daemon_ready_timeout)
            url = daemon.start()
            log.info("started a discovery daemon at %s for %s in %s", url, config.selector, config.namespace)
        else:
            raise LaunchError(f"no discovery daemon answers at {url}; give --selector "
                              "(with --namespace/--kubeconfig) to start one")

        hosts = [] if (daemon is not None and prepare) else _host_names(fetch_hosts(url))
        if hosts and opts.ssh_identity_file:
            argv = [tool("ssh-bootstrap"), "hosts", "--identity", opts.ssh_identity_file,
                    "--out", str(ssh_dir), "--hosts", ",".join(hosts)]
            if opts.ssh_port is not None:
                argv += ["--port", str(opts.ssh_port)]
            _run_step(argv, "ssh-bootstrap hosts", SSHError)  # it locks DIR/.lock itself
        if hosts and config.dataset:
            src, dest = parse_dataset(config.dataset)
            argv = [tool("dataset-sync"), src, dest, "--hosts", ",".join(hosts)]
            if (ssh_dir / "ssh_config").exists():
                argv += ["--ssh-config", str(ssh_dir / "ssh_config")]
            _run_step(argv, "dataset-sync", SyncError)

        argv = build_horovodrun_command(opts, config.command)
        env = horovodrun_environment(opts, os.environ)
        env["DISCOVERY_URL"] = url
        env[RUN_ID_ENV] = run_id
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        if opts.ssh_identity_file:
            env["PATH"] = f"{BootstrapDir(ssh_dir).bin_dir}{os.pathsep}{env['PATH']}"
            env[SSH_CONFIG_ENV] = str(BootstrapDir(ssh_dir).ssh_config)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[events.EVENTS_ENV] = str(events_file)
        recorder = HostRecorder(url, config.poll_interval)
        recorder.start()
        log.info("running: %s", " ".join(argv))
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise LaunchError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        signal.signal(signal.SIGTERM, previous_term)  # from here on the forwarder handles it
        if config.stall_timeout:
            watchdog = Watchdog(str(events_file), config.stall_timeout, lambda report: _stop_stalled(proc, report))
            watchdog.start()
        with _SignalForwarder(proc):
            while True:
                try:
                    returncode = proc.wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover - handler forwards instead
                    continue
        if watchdog is not None and watchdog.fired:
            returncode = 1
        return exit_code(returncode)
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if watchdog is not None:
            watchdog.stop()
        if recorder is not None:
            recorder.stop()
            _reap(config, ssh_dir, recorder, run_id)
        if daemon is not None:
            daemon.stop()
        if returncode is not None:
            _report(config, start, time.time(), recorder, exit_code(returncode), events.read_records(events_file))
        shutil.rmtree(workdir, ignore_errors=True)


STALL_KILL_GRACE = 10.0


def _stop_stalled(proc: subprocess.Popen, report: str) -> None:
    """The watchdog fired: say why, then stop horovodrun's session (SIGTERM, then SIGKILL)."""
    print(f"elastic-run: error: the job stalled (--stall-timeout): {report}", file=sys.stderr, flush=True)
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


def _reap(config: LaunchConfig, ssh_dir: Path, recorder: HostRecorder, run_id: str) -> None:
    snapshots = recorder.snapshots()
    # hosts still served; a pod that left the set took its processes with it
    hosts = _host_names(snapshots[-1][1]) if snapshots else []
    opts = config.horovodrun
    wrapper = BootstrapDir(ssh_dir).ssh_wrapper
    if opts.ssh_identity_file and wrapper.exists():
        ssh = [str(wrapper), "-o", "BatchMode=yes"]
    else:
        ssh = ["ssh", "-o", "BatchMode=yes"]
        if opts.ssh_port is not None:
            ssh += ["-p", str(opts.ssh_port)]
        if opts.ssh_identity_file:
            ssh += ["-i", opts.ssh_identity_file]
    failed = reap_hosts(hosts, ssh, run_id)
    if failed:
        log.warning("could not check for leftover training processes on %s", ", ".join(failed))


def _quote(arg: str) -> str:
    import shlex
    return shlex.quote(arg)


def _report(config: LaunchConfig, start: float, end: float, recorder: HostRecorder | None, code: int,
            driver: list) -> None:
    snapshots = recorder.snapshots() if recorder else []
    records = timeline.read_metrics(config.metrics_file)
    lines = timeline.build_timeline(start, end, snapshots, records, code, driver)
    summary = timeline.summarize(start, end, snapshots, records, code, driver)
    print(timeline.render(lines, summary), file=sys.stderr, flush=True)
    if config.timeline_file:
        doc = {"start": start, "end": end, "events": [asdict(e) for e in lines],
               "summary": asdict(summary), "hosts": [[t, list(h)] for t, h in snapshots],
               "driver_events": [asdict(r) for r in driver]}
        path = Path(config.timeline_file)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)
