"""Horovod patches 0102 and 0105 (no middleman, the discovery timeout, the spawned discovery
script): horovodrun starts each worker without a Python middleman and without a
shell (safe_shell_exec), relays every worker's output from one thread, and ends a worker as
before: SIGTERM to its process group, SIGKILL after 5 s.

Through plain horovodrun (non-elastic, local hosts: no ssh, the worker command is what
horovodrun would give ssh), with tests/runtime/launcher_job.py. Each test says what it checks
on stock Horovod (0.28.1, and +eh2: its fixes did not touch the launch path).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.test_horovod_patches import HOROVODRUN, run_env
from tests.waiting import wait_for

JOB = str(Path(__file__).parent / "launcher_job.py")


def start(tmp_path: Path, mode: str, np: int) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "horovodrun.out"
    env = run_env(LAUNCHER_DIR=str(tmp_path), LAUNCHER_MODE=mode)
    with open(out, "w") as sink:
        proc = subprocess.Popen([HOROVODRUN, "-np", str(np), "-H", f"localhost:{np}", "--network-interface", "lo",
                                 sys.executable, JOB], stdout=sink, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return proc, out


def finish(proc: subprocess.Popen, timeout: float = 60) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process under pid."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    out, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out.append((p, cmd))
        todo += kids.get(p, [])
    return out


@pytest.mark.timeout(180)
def test_a_killed_workers_exit_code_and_every_prefix_are_as_before(tmp_path):
    """0102: rank 1 kills itself with SIGKILL: horovodrun reports exit code 137 for it (128 + 9),
    ends rank 0 and fails; both ranks' lines arrive with their [rank]<stream>: prefixes. Passes
    on stock Horovod too: the patch must not change any of it."""
    proc, out = start(tmp_path, "exit", 2)
    try:
        code = finish(proc, 120)
    finally:
        (tmp_path / "stop").touch()
    text = out.read_text()
    assert code != 0, text
    for line in ("[0]<stdout>:hello from 0", "[1]<stdout>:hello from 1",
                 "[0]<stderr>:complaint from 0", "[1]<stderr>:complaint from 1",
                 "Process 1 exit with status code 137."):
        assert line in text.splitlines(), f"{line!r} missing from:\n{text}"
    assert "Exit code: 137" in text, text
    assert not alive(int((tmp_path / "rank0.pid").read_text()))


@pytest.mark.timeout(180)
def test_a_hung_worker_gets_sigterm_then_sigkill(tmp_path):
    """0102: rank 0 fails, so horovodrun ends rank 1, which ignores SIGTERM: it gets SIGTERM (its
    handler runs), then SIGKILL after the 5 s grace; horovodrun then exits. Fails on stock
    Horovod: its middleman stopped the worker (SIGSTOP, since sh had exec'ed it) before
    sending SIGTERM, so no handler ever ran (a graceful leave could not either) and the worker
    was only SIGKILLed."""
    proc, out = start(tmp_path, "hung", 2)
    code = finish(proc, 120)
    text = out.read_text()
    assert code != 0, text
    assert "Process 0 exit with status code 3." in text, text
    pid = int((tmp_path / "rank1.pid").read_text())
    wait_for(lambda: not alive(pid), timeout=30, what="the hung rank 1 to be gone")
    sigterm = tmp_path / "rank1.sigterm"
    assert sigterm.exists() and "SIGTERM" in sigterm.read_text(), \
        f"rank 1 never ran its SIGTERM handler before it was killed:\n{text}"
    assert "Process 1 exit with status code 137." in text, text


@pytest.mark.timeout(180)
def test_no_per_worker_process_on_the_launcher(tmp_path):
    """0102: while 3 workers run, the only processes under horovodrun are the 3 workers themselves
    (no Python middleman, no shell); they exit 0 when asked. Fails on stock Horovod: a
    multiprocessing middleman per worker (6 processes)."""
    proc, out = start(tmp_path, "wait", 3)
    try:
        wait_for(lambda: all((tmp_path / f"rank{r}.pid").exists() for r in range(3)), timeout=120,
                 what="3 workers running")
        workers = {int((tmp_path / f"rank{r}.pid").read_text()) for r in range(3)}
        under = descendants(proc.pid)
        assert {p for p, _ in under} == workers, "processes under horovodrun:\n" + "\n".join(
            f"{p} {cmd}" for p, cmd in under)
        assert all(JOB in cmd for _, cmd in under)
    finally:
        (tmp_path / "stop").touch()
    assert finish(proc, 120) == 0, out.read_text()


@pytest.mark.timeout(120)
def test_a_hung_discovery_script_is_ended_and_the_poll_fails(tmp_path):
    """0105/0108: a discovery script that hangs (here with a child of its own) is ended after
    the timeout, its whole process group with it, and the poll fails with a one-line reason
    (the driver logs it and polls again). Fails on stock Horovod and before the discovery timeout: no timeout, the
    poll (and the driver with it) waited forever."""
    from horovod.runner.elastic.discovery import HostDiscoveryScript

    pidfile = tmp_path / "child.pid"
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pidfile}\necho localhost:1\nwait\n")
    script.chmod(0o755)
    discovery = HostDiscoveryScript(str(script), 1, timeout=1)
    with pytest.raises(RuntimeError, match=r"^Discovery script timed out after 1 s and was terminated: "):
        discovery.find_available_hosts_and_slots()
    child = int(pidfile.read_text())
    wait_for(lambda: not alive(child), timeout=30, what="the discovery script's child to be gone")


def test_a_bad_discovery_timeout_is_a_usage_error(tmp_path):
    """0105/0108: HOROVOD_ELASTIC_DISCOVERY_TIMEOUT_SECONDS is validated like the other elastic
    variables: one line, exit 2, no traceback."""
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:1\n")
    script.chmod(0o755)
    res = subprocess.run([HOROVODRUN, "-np", "1", "--host-discovery-script", str(script), "true"],
                         capture_output=True, text=True, timeout=60,
                         env=run_env(HOROVOD_ELASTIC_DISCOVERY_TIMEOUT_SECONDS="soon"))
    assert res.returncode == 2, res.stderr
    assert "HOROVOD_ELASTIC_DISCOVERY_TIMEOUT_SECONDS='soon': expected a number of seconds" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.timeout(180)
@pytest.mark.parametrize("setpriv", [True, False], ids=["setpriv", "no-setpriv"])
def test_the_spawned_discovery_script_still_ends_with_the_driver(tmp_path, setpriv):
    """0102/0105: the discovery script is started without forking the driver (vfork, and
    `setpriv --pdeathsig TERM` for the tie; without setpriv on PATH, forked as before). Nothing
    is lost either way: its output is the poll's answer, and a driver killed with -9 during a
    poll ends the script (SIGTERM), as no middleman's tie did. (A CPU saving, which
    scripts/benchmarks/bench-launcher measures: this passes with no middleman alone too.)"""
    pidfile = tmp_path / "script.pid"
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nif [ -e {tmp_path}/hang ]; then echo $$ > {pidfile}; exec /bin/sleep 600; fi\n"
                      "echo localhost:2\n")
    script.chmod(0o755)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = run_env(PATH=os.environ["PATH"] if setpriv else str(empty))
    code = ("import sys; from horovod.runner.elastic.discovery import HostDiscoveryScript; "
            "from horovod.runner.common.util import safe_shell_exec as s; "
            "d = HostDiscoveryScript(sys.argv[1], 1, timeout=600); print(d.find_available_hosts_and_slots(), "
            "bool(s._setpriv), flush=True); open(sys.argv[2], 'w').close(); d.find_available_hosts_and_slots()")
    driver = subprocess.Popen([sys.executable, "-c", code, str(script), str(tmp_path / "hang")],
                              stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline() == f"{{'localhost': 2}} {setpriv}\n"
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=60, what="the hung poll")
        pid = int(pidfile.read_text())
        assert alive(pid)
        os.kill(driver.pid, signal.SIGKILL)
        wait_for(lambda: not alive(pid), timeout=30, what="the discovery script to end with its driver")
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        if driver.stdout is not None:
            driver.stdout.close()
