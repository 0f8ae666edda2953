"""Horovod patch 0102 (a relay that never dies, output that never blocks, the shutdown
deadline): horovodrun's output relay never dies and never blocks, and SIGTERM ends horovodrun
within a bound.

Through plain horovodrun: ``-H localhost:2`` for the static jobs (the workers are plain Python,
no Horovod import: what is tested is how horovodrun relays them), and an elastic job with a
discovery script whose hosts are local names (tests/runtime/test_horovod_patches.py) for the
blocked-output test. horovodrun's stdout is a pipe this test reads, or (the blocked tests)
does not read. Each test says what it does on the build before these fixes (eh3).
"""
from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from shared.event_kinds import Kind
from tests.runtime.liveness import kill_quietly, pid_gone
from tests.runtime.test_horovod_patches import HOROVODRUN, discovery_script, read_log, run_env
from tests.waiting import wait_for

HERE = Path(__file__).parent

INVALID_UTF8 = """
import sys, time
sys.stdout.buffer.write(b"caf\\xe9\\n")
sys.stdout.flush()
time.sleep(2)
print("done", flush=True)
"""

# "é" (c3 a9) and a tqdm-style progress line, each cut between two writes
SPLIT = """
import sys, time
out = sys.stdout.buffer
parts = (b"caf\\xc3", b"\\xa9 au lait\\n", b"\\r50%|\\xe2\\x96", b"\\x88| \\r100%|\\xe2\\x96\\x88\\xe2",
         b"\\x96\\x88|\\n")
for part in parts:
    out.write(part)
    out.flush()
    time.sleep(0.3)
"""

# prints 2000-character lines until told to stop; its pid in $RELAY_DIR/pid.<rank>
CHATTY = """
import os, time
d = os.environ["RELAY_DIR"]
with open(f"{d}/pid.{os.environ['HOROVOD_RANK']}", "w") as f:
    f.write(str(os.getpid()))
line = "y" * 2000
while True:
    print(line, flush=True)
    time.sleep(0.001)
"""

# leaves a process of its own session holding its stdout and stderr, then waits; pids in
# $RELAY_DIR/escaped.<rank> and pid.<rank>
ESCAPES = """
import os, subprocess, sys, time
d, rank = os.environ["RELAY_DIR"], os.environ["HOROVOD_RANK"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
with open(f"{d}/escaped.{rank}", "w") as f:
    f.write(str(child.pid))
with open(f"{d}/pid.{rank}", "w") as f:
    f.write(str(os.getpid()))
print("ready", flush=True)
time.sleep(600)
"""


class Reader:
    """Drains a pipe into memory in a thread of its own (once started)."""

    def __init__(self, pipe):
        self.pipe, self.data, self.thread = pipe, bytearray(), threading.Thread(target=self._run, daemon=True)

    def start(self) -> Reader:
        self.thread.start()
        return self

    def _run(self) -> None:
        while chunk := os.read(self.pipe.fileno(), 65536):
            self.data += chunk

    def text(self) -> str:
        return self.data.decode(errors="replace")


def run_static(tmp_path: Path, script: str, np: int = 2, **env: str) -> subprocess.Popen:
    path = tmp_path / "s.py"
    path.write_text(script)
    return subprocess.Popen([HOROVODRUN, "-np", str(np), "-H", f"localhost:{np}", "--gloo", sys.executable, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=run_env(RELAY_DIR=str(tmp_path), **env), start_new_session=True, cwd=tmp_path)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def queued(pipe) -> int:
    """Bytes written into the pipe and not yet read."""
    return int.from_bytes(fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def blocked_in_pipe_write(pid: int) -> bool:
    """A thread of pid sleeps in the kernel's pipe write (its wchan): the pipe it writes is
    full. How many bytes that takes varies (a pipe page holds one or two of these lines,
    whatever the write sizes left), so the byte count alone cannot say it."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if "pipe_write" in (task / "wchan").read_text():
                return True
        except OSError:
            continue  # the thread ended
    return False


@pytest.mark.timeout(300)
def test_invalid_utf8_output_neither_hangs_nor_silences_horovodrun(tmp_path):
    """0102, the reproduction of a relay killed by one byte: each rank writes b"caf\\xe9\\n" (not
    UTF-8), sleeps 2 s and prints "done". Both "done" lines arrive, the invalid byte as U+FFFD, horovodrun exits 0.
    Before a relay that never dies the relay thread died of the UnicodeDecodeError: no output,
    exit or kill was seen again and horovodrun hung (this test: no "done" in 180 s)."""
    proc = run_static(tmp_path, INVALID_UTF8)
    out = Reader(proc.stdout).start()
    try:
        wait_for(lambda: proc.poll() is not None, 180, "horovodrun to exit (a relay that dies: it hangs)",
                 detail=out.text)
        out.thread.join(30)
        text = out.text()
        assert proc.returncode == 0, text
        for rank in (0, 1):
            assert f"[{rank}]<stdout>:caf\ufffd" in text.splitlines(), text
            assert f"[{rank}]<stdout>:done" in text.splitlines(), text
    finally:
        stop(proc)


@pytest.mark.timeout(300)
def test_a_character_cut_across_writes_arrives_whole(tmp_path):
    """0102: a multi-byte character split between two writes (0.3 s apart, so between two of the
    relay's reads), in a plain line and in tqdm-style progress lines ending in \\r: each
    arrives whole, nothing replaced. Passed before a relay that never dies too (its incremental
    decoder): the replacement must not cost that."""
    proc = run_static(tmp_path, SPLIT)
    out = Reader(proc.stdout).start()
    try:
        wait_for(lambda: proc.poll() is not None, 180, "horovodrun to exit", detail=out.text)
        out.thread.join(30)
        text = out.text()
        assert proc.returncode == 0, text
        for rank in (0, 1):
            assert f"[{rank}]<stdout>:café au lait\n" in text, text
            assert f"[{rank}]<stdout>:50%|█| \r" in text, text
            assert f"[{rank}]<stdout>:100%|██|\n" in text, text
        assert "\ufffd" not in text, text
    finally:
        stop(proc)


@pytest.mark.timeout(300)
def test_sigterm_ends_horovodrun_whose_output_is_blocked(tmp_path):
    """0102: two ranks print 2000-character lines without pause; nobody reads horovodrun's stdout,
    so its pipe fills and stays full. SIGTERM to horovodrun (not to its workers) ends it and
    them. Before output that never blocks the relay thread sat in the blocked write and never
    saw the kill event the SIGTERM handler set: horovodrun and its workers ran on (this test: 120 s)."""
    proc = run_static(tmp_path, CHATTY)
    pids: list[int] = []
    try:
        wait_for(lambda: blocked_in_pipe_write(proc.pid) and len(list(tmp_path.glob("pid.*"))) == 2, 180,
                 "horovodrun's stdout pipe to fill (a thread of it blocked writing it)",
                 detail=lambda: f"{queued(proc.stdout)} bytes queued")
        pids = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
        os.kill(proc.pid, signal.SIGTERM)
        wait_for(lambda: proc.poll() is not None, 120,
                 "horovodrun to end after SIGTERM, its stdout unread (a blocking relay: never)")
        wait_for(lambda: all(pid_gone(p) for p in pids), 30, "its workers to be gone")
        pids = []
    finally:
        for pid in pids:
            kill_quietly(pid)
        stop(proc)


@pytest.mark.timeout(600)
def test_an_elastic_job_whose_output_nobody_reads_trains_on_and_grows(tmp_path):
    """0102: an elastic job (discovery script, 2 hosts, --max-np 3) whose ranks print 2000
    characters a step, and nobody reads horovodrun's stdout or stderr for 30 s: the ranks keep
    training (their log), a host added to discovery meanwhile gets a worker and the world
    grows to 3 (discovery runs on, its change is taken). Then the output is read again: it
    says how much was dropped ("N bytes of output dropped: stdout blocked", past the 256 KiB
    buffer set here), the job is stopped, every rank's "done" line arrives and horovodrun
    exits 0. Before output that never blocks the relay thread sat in the blocked write: the
    ranks blocked in their prints and the discovery script's output was never read (the world never grew)."""
    me = socket.gethostname()
    script, hosts, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log, stop_file, events = tmp_path / "relay.jsonl", tmp_path / "stop", tmp_path / "events.jsonl"
    env = run_env(RELAY_LOG=str(log), RELAY_STOP=str(stop_file), HOROVOD_OUTPUT_BUFFER_BYTES=str(256 * 1024),
                  HOROVOD_GLOO_TIMEOUT_SECONDS="120", HOROVOD_ELASTIC_EVENTS_FILE=str(events))
    proc = subprocess.Popen([HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "3",
                             "--host-discovery-script", str(script), "--network-interface", "lo",
                             "--elastic-timeout", "120", sys.executable, str(HERE / "relay_job.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    err: Reader | None = None

    def steps(size: int, since: float = 0.0) -> int:
        return sum(1 for r in read_log(log) if r["size"] == size and r["time"] > since)

    def driver_events() -> str:
        return "the driver's last events:\n" + "\n".join(
            str(r) for r in read_log(events) if r["kind"] != Kind.PROGRESS)[-3000:]

    def running() -> None:
        if proc.poll() is not None:
            pytest.fail(f"horovodrun exited ({proc.returncode})", pytrace=False)

    try:
        wait_for(lambda: blocked_in_pipe_write(proc.pid) and steps(2) >= 10, 300,
                 "the job to train at world size 2 with its stdout pipe full", alive=running)
        blocked = max(r["time"] for r in read_log(log))
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        wait_for(lambda: steps(3) >= 20, 240,
                 "the world to grow to 3 and train, stdout unread (a blocking relay: the ranks block in print, "
                 "the discovery script's output is never read)", alive=running, detail=driver_events)
        wait_for(lambda: max(r["time"] for r in read_log(log)) > blocked + 30, 120,
                 "30 s of training with stdout unread", alive=running)
        assert blocked_in_pipe_write(proc.pid)  # nobody has read it
        out = Reader(proc.stdout).start()
        err = Reader(proc.stderr).start()
        wait_for(lambda: "bytes of output dropped: stdout blocked" in out.text(), 120,
                 "the count of the output dropped while stdout was blocked", alive=running)
        stop_file.touch()
        wait_for(lambda: proc.poll() is not None, 240, "horovodrun to exit once the job stops")
        out.thread.join(30)
        text = out.text()
        assert proc.returncode == 0, text[-3000:] + err.text()[-3000:]
        for rank in range(3):
            assert f"<stdout>:done {rank}" in text, text[-3000:]
    finally:
        stop(proc)
        if err is not None:
            err.thread.join(30)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.timeout(300)
def test_sigterm_ends_horovodrun_within_its_deadline_whatever_it_waits_for(tmp_path):
    """0102: each rank leaves a process in a session of its own holding its stdout (a daemon it
    started), so after the ranks are ended their output never reaches EOF and horovodrun
    would wait for it for good. SIGTERM to horovodrun: at HOROVOD_SHUTDOWN_DEADLINE_SECONDS
    (5 here) it kills what it still waits for, says so, and exits 143 (128 + SIGTERM). Before
    the shutdown deadline (the relay's other two fixes included) it waited for that output
    forever (this test: 120 s)."""
    proc = run_static(tmp_path, ESCAPES, HOROVOD_SHUTDOWN_DEADLINE_SECONDS="5")
    out = Reader(proc.stdout).start()
    escaped: list[int] = []
    try:
        wait_for(lambda: len(list(tmp_path.glob("pid.*"))) == 2 and out.text().count("<stdout>:ready") == 2, 180,
                 "both ranks to start their daemons", detail=out.text)
        escaped = [int(p.read_text()) for p in tmp_path.glob("escaped.*")]
        ranks = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
        os.kill(proc.pid, signal.SIGTERM)
        wait_for(lambda: proc.poll() is not None, 120,
                 "horovodrun to exit at its shutdown deadline (without one: never)", detail=out.text)
        assert proc.returncode == 128 + signal.SIGTERM, out.text()
        assert all(pid_gone(p) for p in ranks)
        wait_for(lambda: "still running 5 s after SIGTERM" in out.text(), 30, "the line saying why it exits",
                 detail=out.text)
    finally:
        for pid in escaped:
            kill_quietly(pid)
        stop(proc)
