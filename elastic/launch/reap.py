"""Stop a job's leftover training processes on its hosts.

horovodrun starts each worker as ``ssh HOST 'cd ...; VARS... COMMAND'``; when horovodrun is
stopped (SIGINT/SIGTERM to the launcher) it ends its local ssh clients, but a command without
a terminal keeps running on the host. The launcher therefore tags every worker with
``ELASTIC_RUN_ID=<id>`` in its environment and, when the job has ended, runs ``reap_command``
on every host the job saw: it sends SIGTERM to the processes whose environment carries that
tag -- those of this job only -- and SIGKILL to any left after ``grace`` seconds.

``reap_command(run_id, grace)`` is pure; ``reap_hosts(hosts, ssh_argv, run_id)`` blocks until
every host answered or ``timeout`` passed and returns the hosts where it failed (never raises).
Its ssh clients are not tied to the caller: a reap the launcher started finishes (within
``timeout``) even if the launcher is killed meanwhile.
"""
from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

RUN_ID_ENV = "ELASTIC_RUN_ID"
_ID = re.compile(r"^[A-Za-z0-9-]+$")


def reap_command(run_id: str, grace: float = 5.0) -> str:
    """A POSIX shell command that stops this run's processes on the host it runs on."""
    if not _ID.match(run_id):
        raise ValueError(f"bad run id {run_id!r}")
    tag = f"{RUN_ID_ENV}={run_id}"
    find = (f"for d in /proc/[0-9]*; do p=${{d#/proc/}}; [ \"$p\" = \"$$\" ] && continue; "
            f"tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -qx '{tag}' && echo $p; done")
    steps = max(1, int(grace * 10))
    return (f"pids=$({find}); [ -z \"$pids\" ] && exit 0; kill -TERM $pids 2>/dev/null; "
            f"i=0; while [ $i -lt {steps} ]; do alive=''; for p in $pids; do kill -0 $p 2>/dev/null && alive=1; done; "
            f"[ -z \"$alive\" ] && exit 0; sleep 0.1; i=$((i+1)); done; kill -KILL $pids 2>/dev/null; exit 0")


def reap_hosts(hosts: Sequence[str], ssh_argv: Sequence[str], run_id: str, grace: float = 5.0,
               timeout: float = 30.0) -> list[str]:
    """Run ``reap_command`` on each host through ``ssh_argv + [host, command]``; failed hosts."""
    command = reap_command(run_id, grace)

    def one(host: str) -> str | None:
        # Not tied to this process: a reap must finish even if the launcher is killed during
        # it (a host whose reap was cut off kept a worker that ignores SIGTERM). It bounds
        # itself instead (coreutils' timeout, in a session of its own), so it outlives the
        # launcher by at most ``timeout`` seconds.
        argv = ["timeout", "-s", "KILL", f"{timeout:g}", *ssh_argv, host, command]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout + 5, start_new_session=True)
        except (OSError, subprocess.TimeoutExpired):
            return host
        return None if proc.returncode == 0 else host

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return [h for h in pool.map(one, hosts) if h is not None]
