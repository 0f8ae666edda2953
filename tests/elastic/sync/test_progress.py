"""dataset-sync's progress: bars (rich) on a terminal, plain lines otherwise -- for the reporter
on a real pseudo-terminal, and for the command with its stderr on a pty or a pipe."""
from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import time

from elastic.sync.progress import ProgressBoard, ProgressReporter, bar_rows
from tests.elastic.conftest import make_dataset, private_cache, tool

BAR = "━"  # rich's bar glyph


def read_all(fd: int, proc: subprocess.Popen | None = None, timeout: float = 180) -> str:
    """Everything written to the pty's master side until the writer is gone (EOF/EIO)."""
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: every slave descriptor is closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc is not None and proc.poll() is not None:
            break
    return b"".join(chunks).decode("utf-8", "replace")


def board() -> ProgressBoard:
    b = ProgressBoard(["10.0.0.1", "10.0.0.2"], total_files=4, total_bytes=4000)
    b.update("10.0.0.1", phase="done", checked=4, files_sent=4, bytes_sent=4000)
    b.update("10.0.0.2", phase="waiting for lock")
    return b


def test_bar_rows_total_then_one_per_host():
    rows = bar_rows(board().snapshot())
    assert [(r.label, r.completed, r.total) for r in rows] == [("total", 1, 2), ("10.0.0.1", 4, 4),
                                                               ("10.0.0.2", 0, 4)]
    assert rows[2].detail.startswith("waiting for lock, 0/4 files")


def test_reporter_draws_bars_on_a_terminal():
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    reporter = ProgressReporter(board(), stream, interval=0.05)
    assert stream.isatty()
    reporter.start()
    reporter.stop()
    stream.close()
    out = read_all(master)
    os.close(master)
    assert BAR in out and "\x1b[" in out  # drawn bars, with cursor control
    assert "total" in out and "10.0.0.1" in out and "10.0.0.2" in out
    assert "waiting for lock" in out and "progress:" not in out


def test_reporter_writes_plain_lines_off_a_terminal():
    stream = io.StringIO()
    reporter = ProgressReporter(board(), stream, interval=0.05)
    reporter.start()
    reporter.stop()
    out = stream.getvalue()
    assert "progress: 10.0.0.2 waiting for lock files 0/4" in out
    assert "progress: total: 1/2 hosts done, 0 failed" in out
    assert BAR not in out and "\x1b" not in out


def test_the_command_shows_bars_on_a_terminal_and_lines_in_a_pipe(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = make_dataset(tmp_path / "ds", small=30, big_mib=1)
    hosts = ",".join(pod_ips.values())
    argv = [tool("dataset-sync"), str(src), "/data/progress", "--hosts", hosts, "--ssh-config",
            str(ssh_dir / "ssh_config"), "--progress-interval", "0.2"]
    env = private_cache(tmp_path)

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    on_tty = read_all(master, proc)
    os.close(master)
    assert proc.wait(timeout=180) == 0, on_tty
    proc.stdout.close()
    assert BAR in on_tty and "total" in on_tty
    for ip in pod_ips.values():
        assert ip in on_tty
    assert "3/3 hosts" in on_tty and "progress:" not in on_tty

    piped = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=180)
    assert piped.returncode == 0, piped.stderr
    assert "progress: total: 3/3 hosts done" in piped.stderr
    assert BAR not in piped.stderr and "\x1b" not in piped.stderr
