"""Stop a job's leftover training processes on its hosts.

horovodrun starts each worker as ``ssh HOST 'cd ...; VARS... COMMAND'``; when horovodrun is
stopped (SIGINT/SIGTERM to the launcher) it ends its local ssh clients, but a command without
a terminal keeps running on the host. The launcher therefore tags every worker with
``ELASTIC_RUN_ID=<id>`` in its environment and, when the job has ended, runs ``reap_command``
on every host the job saw: it sends SIGTERM to the processes whose environment carries that
tag -- those of this job only -- and SIGKILL to any left after ``grace`` seconds, then scans
again and SIGKILLs what a stopping process started meanwhile, until a scan finds none.

``reap_command(run_id, grace)`` is pure; ``reap_hosts(hosts, ssh_argv, run_id)`` blocks until
every host answered or ``timeout`` passed and returns the hosts where it failed (never raises).
The reap is one process of its own (``python -m elastic.common.reap``, in a session of its
own, bounded by coreutils' ``timeout``) that reaches every host: once it is started, every
host is reaped even if the caller is killed the next moment (a caller that started one ssh
client per host could be killed between two of them, and a host never reached kept a worker
that ignores SIGTERM); it outlives the caller by at most ``timeout`` seconds.

A job's runs: every worker also carries ``ELASTIC_JOB_ID=<job>`` (the same for every retry of
one job: ``elastic-run --job-id``), and a retried launcher runs ``reap_command(run_id, grace,
job_id=job)`` on every host before its own world starts there: whatever an earlier run of the
job left (its launcher was killed, its node vanished) is stopped, its own run's processes are
kept. ``term_command(run_id, wait)`` / ``term_hosts`` are elastic-run's SIGTERM path: one
SIGTERM to each root of the run's process trees (the training commits, rank 0 checkpoints),
then a bounded wait for them to end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from elastic.environment import ELASTIC_JOB_ID
from shared.exitcodes import EXIT_OK
from shared.lease_wire import RUN_ID_ENV

JOB_ID_ENV = ELASTIC_JOB_ID
_ID = re.compile(r"^[A-Za-z0-9-]+$")
KILL_ROUNDS = 50  # scans after the SIGKILL, 0.1 s apart, before the host counts as failed


def _find(tag: str, skip: str | None = None) -> str:
    """A shell loop printing the pid of every process (not the shell itself) whose environment
    carries the line ``tag``; with ``skip``, only those that also belong to a run
    (``ELASTIC_RUN_ID=...``) and not to the run of the line ``skip``: a launcher's own
    processes (elastic-run, its daemon, the prepare hook) carry no run id and are never found.
    One ``grep -z`` reads every process's environment (a process per pid would fork hundreds
    of times on a busy host); only the few it names are checked further."""
    test = ""
    if skip:
        test = (f" grep -qz '^{RUN_ID_ENV}=' \"$f\" 2>/dev/null || continue;"
                f" grep -qxzF -- '{skip}' \"$f\" 2>/dev/null && continue;")
    return (f"for f in $(grep -lxzF -- '{tag}' /proc/[0-9]*/environ 2>/dev/null); do p=${{f#/proc/}}; "
            f"p=${{p%/environ}}; [ \"$p\" = \"$$\" ] && continue;{test} echo $p; done")


def _check(name: str, value: str) -> str:
    if not _ID.match(value):
        raise ValueError(f"bad {name} {value!r}")
    return value


def reap_command(run_id: str | None, grace: float = 5.0, *, job_id: str | None = None) -> str:
    """A POSIX shell command that stops this run's processes on the host it runs on: SIGTERM,
    up to ``grace`` seconds, SIGKILL; then it scans again and SIGKILLs what it finds (started
    meanwhile) until a scan finds nothing (exit 0) or ``KILL_ROUNDS`` scans did not (exit 1).
    With ``job_id``: the processes of every *other* run of that job (``ELASTIC_JOB_ID``), those
    of ``run_id`` (if given) excepted: what a retried launcher stops before its own world
    starts."""
    if job_id is not None:
        find = _find(f"{JOB_ID_ENV}={_check('job id', job_id)}", f"{RUN_ID_ENV}={_check('run id', run_id or '-')}")
    elif run_id is not None:
        find = _find(f"{RUN_ID_ENV}={_check('run id', run_id)}")
    else:
        raise ValueError("a reap needs a run id or a job id")
    steps = max(1, int(grace * 10))
    return (f"pids=$({find}); [ -z \"$pids\" ] && exit 0; kill -TERM $pids 2>/dev/null; "
            f"i=0; while [ $i -lt {steps} ]; do alive=''; for p in $pids; do kill -0 $p 2>/dev/null && alive=1; done; "
            f"[ -z \"$alive\" ] && break; sleep 0.1; i=$((i+1)); done; "
            f"r=0; while [ $r -lt {KILL_ROUNDS} ]; do [ -n \"$pids\" ] && kill -KILL $pids 2>/dev/null; "
            f"sleep 0.1; pids=$({find}); [ -z \"$pids\" ] && exit 0; r=$((r+1)); done; exit 1")


def term_command(run_id: str, wait: float) -> str:
    """A POSIX shell command that asks this run's training on the host it runs on to leave:
    SIGTERM once to each *root* of the run's processes there (one whose parent does not carry
    the run's tag: the lease wrapper, or the training process; never a data-loading child,
    which would fail its trainer), then waits up to ``wait`` seconds for every process of the
    run to end. Exit 0 when none is left, 1 otherwise (the caller reaps)."""
    tag = f"{RUN_ID_ENV}={_check('run id', run_id)}"
    find = _find(tag)
    steps = max(1, int(wait * 10))
    root = (f"pp=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status 2>/dev/null); "
            f"grep -qxzF -- '{tag}' /proc/$pp/environ 2>/dev/null || roots=\"$roots $p\"")
    return (f"pids=$({find}); [ -z \"$pids\" ] && exit 0; roots=''; for p in $pids; do {root}; done; "
            f"[ -n \"$roots\" ] && kill -TERM $roots 2>/dev/null; "
            f"i=0; while [ $i -lt {steps} ]; do pids=$({find}); [ -z \"$pids\" ] && exit 0; "
            f"sleep 0.1; i=$((i+1)); done; exit 1")


def term_hosts(hosts: Sequence[str], ssh_argv: Sequence[str], run_id: str, wait: float) -> list[str]:
    """Run ``term_command(run_id, wait)`` on every host at once (threads of this process: the
    caller stays to reap what is left); blocks at most ``wait`` + 10 s; the hosts where the
    run's processes did not all end (or that could not be reached)."""
    command = term_command(run_id, wait)
    return _reap_each(hosts, ssh_argv, command, wait + 10) if hosts else []


def _untagged() -> dict[str, str]:
    """This process's environment without the run's tags: a reap's own processes must never
    match it (on a host that shares its processes with the caller)."""
    return {k: v for k, v in os.environ.items() if k not in (RUN_ID_ENV, JOB_ID_ENV)}


def _reap_each(hosts: Sequence[str], ssh_argv: Sequence[str], command: str, timeout: float) -> list[str]:
    """``ssh_argv + [host, command]`` on every host at once, each bounded by ``timeout``
    (coreutils' timeout: it ends even if this process is killed); the hosts where it failed."""
    env = _untagged()

    def one(host: str) -> str | None:
        argv = ["timeout", "-s", "KILL", f"{timeout:g}", *ssh_argv, host, command]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout + 5,
                                  env=env)
        except (OSError, subprocess.TimeoutExpired):
            return host
        return None if proc.returncode == 0 else host

    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return [h for h in pool.map(one, hosts) if h is not None]


def reap_job_here(hosts: Sequence[str], ssh_argv: Sequence[str], run_id: str, job_id: str,
                  grace: float = 5.0, timeout: float = 30.0) -> list[str]:
    """``reap_hosts(..., job_id=job_id)`` in this process's threads, without a process of its
    own (a Python start less: seconds on a loaded node): for a caller that does not serve a
    host until the reap there is done, so a reap cut short by the caller's death only means the
    host is prepared, and reaped, again (the prepare hook). Blocks at most ``timeout`` + 5 s;
    the hosts where it failed; ValueError for a bad id."""
    command = reap_command(run_id, grace, job_id=job_id)
    return _reap_each(hosts, ssh_argv, command, timeout) if hosts else []


def reap_hosts(hosts: Sequence[str], ssh_argv: Sequence[str], run_id: str, grace: float = 5.0,
               timeout: float = 30.0, *, job_id: str | None = None) -> list[str]:
    """Run ``reap_command(run_id, grace, job_id=job_id)`` on each host through ``ssh_argv +
    [host, command]`` (in one process of its own, see the module docstring); the hosts where it
    failed, or all of them when the reap could not run. With ``job_id``: every other run of
    the job is stopped, ``run_id``'s processes are kept."""
    reap_command(run_id, grace, job_id=job_id)  # a bad id is the caller's error: ValueError here
    if not hosts:
        return []
    # the reap's own processes do not carry the run's tags: a reap on a host that shares its
    # processes with the caller must not stop itself
    env = _untagged()
    argv = ["timeout", "-s", "KILL", f"{timeout + 5:g}", sys.executable, "-m", "elastic.common.reap",
            "--run-id", run_id, "--grace", f"{grace:g}", "--timeout", f"{timeout:g}",
            "--ssh-argv", json.dumps(list(ssh_argv))]
    if job_id is not None:
        argv += ["--job-id", job_id]
    argv += ["--", *hosts]
    try:
        # not tied to this process: a reap must finish even if the launcher is killed during it
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=timeout + 10, start_new_session=True)
    except (OSError, subprocess.TimeoutExpired):
        return list(hosts)
    if proc.returncode != 0:
        return list(hosts)
    failed = set(proc.stdout.split())
    return [h for h in hosts if h in failed]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m elastic.common.reap --run-id ID [--job-id JOB] --ssh-argv JSON [--grace S]
    [--timeout S] HOST...``: reap every HOST (with ``--job-id``: the job's other runs); prints
    the hosts where it failed, one a line; exit 0."""
    parser = argparse.ArgumentParser(prog="python -m elastic.common.reap")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--job-id", default=None)
    parser.add_argument("--ssh-argv", required=True, help="the ssh command, a JSON list of strings")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("hosts", nargs="+")
    args = parser.parse_args(argv)
    try:
        ssh = json.loads(args.ssh_argv)
        if not (isinstance(ssh, list) and ssh and all(isinstance(a, str) for a in ssh)):
            raise ValueError("not a list of strings")
        command = reap_command(args.run_id, args.grace, job_id=args.job_id)
    except ValueError as exc:
        parser.error(str(exc))
    for host in _reap_each(args.hosts, ssh, command, args.timeout):
        print(host, flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
