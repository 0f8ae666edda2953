"""Prepare one host before the discovery daemon serves it (the daemon's ``--prepare-cmd``).

    python -m elastic.prepare.hook --identity FILE --ssh-dir DIR [--ssh-port P]
                                  [--dataset SRC:DEST] -- HOST

HOST comes from a pod (the daemon appends ``-- HOST``): it must be an IPv4 address or an
RFC 1123 name (``hostlist.validate_host_name``); anything else -- an option such as
``--help``, shell syntax, a line break -- is refused with exit 2 before any step runs.

1. ``ssh-bootstrap hosts --identity FILE --out DIR --port P --hosts HOST``: checks that HOST
   answers with the job's key, adds its host key to ``DIR/known_hosts`` -- the file the ssh
   wrapper horovodrun uses checks against -- and merges HOST into ``DIR/hostfile``.
   ssh-bootstrap locks ``DIR/.lock`` around those updates itself (the daemon prepares several
   hosts at once and the launcher pins the first hosts into the same directory), so this
   module holds no lock.  With ``DISCOVERY_POD_UID`` in the environment (the discovery daemon
   sets it), ``--repin-for-uid UID`` is passed: an address reused by a new pod gets its new
   host key pinned; a changed key for the same pod is still refused;
2. with ``--reap-job JOB --keep-run RUN`` (what elastic-run passes, and deploy/'s sidecar), the
   processes of job JOB's other runs on HOST are stopped (``elastic.common.reap.reap_job_here``,
   in this process: an earlier launcher of the same job was killed, its workers may still
   train); a host where that fails is not served;
3. with ``--dataset``, ``dataset-sync SRC DEST --host HOST --ssh-config DIR/ssh_config
   --peers-file DIR/hostfile``: the job's other pinned hosts are peers, so a late joiner pulls
   the dataset from one that holds a verified copy (relay), not from the launcher.

This command dies with the process that started it (``PR_SET_PDEATHSIG``), and its steps die
with it: a killed discovery daemon leaves no preparation running.

Exit 0 when HOST is ready, with one line on stderr saying how long each step took; otherwise
non-zero with one line on stderr (the daemon retries and reports the line). ``elastic-run``
writes this command for the daemons it starts; the launcher pod in deploy/ writes the same one
out by hand (tests/deploy/test_prepare_hook.py holds them together).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from elastic.common.hostlist import validate_host_name
from elastic.common.procs import tie_to_parent, tied_run
from elastic.common.reap import reap_command, reap_job_here
from elastic.common.tools import tool
from elastic.errors import ConfigError, ElasticError, SSHError, SyncError
from elastic.ssh.config import BootstrapDir
from shared.argparser import OneLineParser
from shared.environment import DISCOVERY_POD_UID
from shared.exitcodes import EXIT_OK
from shared.runner import run_main


def parse_dataset(value: str) -> tuple[str, str]:
    """``SRC:DEST`` -> (SRC, DEST); ConfigError when either side is empty."""
    src, sep, dest = value.rpartition(":")
    if not sep or not src or not dest:
        raise ConfigError(f"--dataset wants SRC:DEST, got {value!r}")
    return src, dest


def prepare_argv(identity: str, ssh_dir: str, ssh_port: int | None, dataset: str | None,
                 reap_job: tuple[str, str] | None = None) -> list[str]:
    """The daemon's ``--prepare-cmd`` (without the host the daemon appends), as argv;
    ``reap_job``: (job id, this run's id) to stop the job's other runs on the host."""
    argv = [sys.executable, "-m", "elastic.prepare.hook", "--identity", identity, "--ssh-dir", ssh_dir]
    if ssh_port is not None:
        argv += ["--ssh-port", str(ssh_port)]
    if reap_job is not None:
        argv += ["--reap-job", reap_job[0], "--keep-run", reap_job[1]]
    if dataset:
        argv += ["--dataset", dataset]
    return argv


def failure_line(stderr: str, stdout: str) -> str:
    """The line that names why a step failed: its first ``error:`` line on stderr (the cause,
    before any summary), else the last stderr line, else the last stdout line."""
    err = [line.strip() for line in stderr.splitlines() if line.strip()]
    causes = [line[len("error:"):].strip() for line in err if line.startswith("error:")]
    if causes:
        return causes[0]
    out = [line.strip() for line in stdout.splitlines() if line.strip()]
    return (err or out or ["no output"])[-1]


def _run(argv: list[str], what: str, error: type[ElasticError]) -> None:
    proc = tied_run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        raise error(f"{what} failed ({proc.returncode}): {failure_line(proc.stderr, proc.stdout)}")


def prepare(host: str, identity: str, ssh_dir: str, ssh_port: int | None, dataset: str | None,
            pod_uid: str | None = None, reap_job: tuple[str, str] | None = None) -> dict[str, float]:
    """Pin ``host``'s key (re-pinning it for a new ``pod_uid``), stop the processes of the
    job's other runs there (``reap_job``: job id, this run's id) and sync the dataset to it;
    the seconds each step took, by name; raises SSHError/SyncError/ConfigError."""
    validate_host_name(host)
    took: dict[str, float] = {}
    mark = time.monotonic()
    argv = [tool("ssh-bootstrap"), "hosts", "--identity", identity, "--out", ssh_dir, f"--hosts={host}"]
    if ssh_port is not None:
        argv += ["--port", str(ssh_port)]
    if pod_uid:
        argv += ["--repin-for-uid", pod_uid]
    _run(argv, f"ssh-bootstrap hosts for {host}", SSHError)
    took["ssh pinning"], mark = time.monotonic() - mark, time.monotonic()
    if reap_job is not None:
        ssh = [str(BootstrapDir(ssh_dir).ssh_wrapper), "-o", "BatchMode=yes"]
        if reap_job_here([host], ssh, reap_job[1], reap_job[0]):
            raise SSHError(f"could not stop an earlier run of job {reap_job[0]} on {host}")
        took["earlier runs stopped"], mark = time.monotonic() - mark, time.monotonic()
    if dataset:
        src, dest = parse_dataset(dataset)
        _run([tool("dataset-sync"), f"--host={host}", "--ssh-config", f"{ssh_dir}/ssh_config",
              "--peers-file", f"{ssh_dir}/hostfile", "--", src, dest],
             f"dataset-sync to {host}", SyncError)
        took["dataset sync"] = time.monotonic() - mark
    return took


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m elastic.prepare.hook", description=__doc__.split("\n\n")[0])
    parser.add_argument("--identity", required=True, help="the job's private SSH key")
    parser.add_argument("--ssh-dir", required=True, help="where pinned host keys and ssh configs go")
    parser.add_argument("--ssh-port", type=int, default=None, help="the hosts' sshd port")
    parser.add_argument("--dataset", default=None, metavar="SRC:DEST", help="sync SRC to DEST on the host")
    parser.add_argument("--reap-job", default=None, metavar="JOB",
                        help="stop the processes of job JOB's other runs on the host (ELASTIC_JOB_ID)")
    parser.add_argument("--keep-run", default=None, metavar="RUN", help="with --reap-job: this run, kept")
    parser.add_argument("host")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        tie_to_parent()  # the daemon that runs us does not tie its children; we die with it
        validate_host_name(args.host)
        reap_job = None
        if args.reap_job is not None:
            if not args.keep_run:
                raise ConfigError("--reap-job needs --keep-run (this run's id)")
            reap_job = (args.reap_job, args.keep_run)
            try:
                reap_command(args.keep_run, job_id=args.reap_job)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        took = prepare(args.host, args.identity, args.ssh_dir, args.ssh_port, args.dataset,
                       os.environ.get(DISCOVERY_POD_UID) or None, reap_job)
        steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in took.items())
        print(f"prepared {args.host} in {sum(took.values()):.1f} s ({steps})", file=sys.stderr)
        return EXIT_OK
    return run_main("prepare", body, usage=ConfigError, failure=ElasticError)


if __name__ == "__main__":
    sys.exit(main())
