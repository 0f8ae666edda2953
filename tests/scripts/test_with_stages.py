"""scripts/with-stages (the set-up's Horovod build stages): a bar redrawn in place on a
terminal, one plain line per stage otherwise; the command's output in the log; its exit code."""
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

WITH_STAGES = Path(__file__).resolve().parents[2] / "scripts" / "with-stages"

# stands in for horovod-fork/tools/build-horovod: stage lines on stderr among other output
BUILD = """
echo "build-horovod: stage 1/3: downloading" >&2
echo "compiler noise"
echo "build-horovod: stage 2/3: compiling" >&2
echo "more noise" >&2
echo "build-horovod: stage 3/3: writing the wheel" >&2
exit "$1"
"""


def run_on_pty(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=timeout), b"".join(chunks).decode()


@pytest.mark.parametrize("code", [0, 3])
def test_a_bar_on_a_terminal(tmp_path, code):
    log = tmp_path / "build.log"
    rc, out = run_on_pty([str(WITH_STAGES), "setup: Horovod build", str(log), "sh", "-c", BUILD, "sh", str(code)])
    assert rc == code
    assert "\r\x1b[K" in out  # redrawn in place
    final = out.rsplit("\r\x1b[K", 1)[1]
    if code == 0:
        assert final.startswith("setup: Horovod build [####################] 3/3 done (")
    else:
        assert final.startswith(f"setup: Horovod build [#############-------] 3/3 failed (exit 3; log: {log})")
    assert "setup: Horovod build: stage" not in out and "noise" not in out
    assert "compiler noise" in log.read_text() and "more noise" in log.read_text()


def test_plain_lines_when_not_a_terminal(tmp_path):
    log = tmp_path / "build.log"
    proc = subprocess.run([str(WITH_STAGES), "setup: Horovod build", str(log), "sh", "-c", BUILD, "sh", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stderr.splitlines() == ["setup: Horovod build: stage 1/3: downloading",
                                        "setup: Horovod build: stage 2/3: compiling",
                                        "setup: Horovod build: stage 3/3: writing the wheel"]
    assert proc.stdout == "" and "\x1b" not in proc.stderr


def test_build_horovod_announces_its_stages_in_that_form():
    text = (WITH_STAGES.parents[1] / "horovod-fork" / "tools" / "build-horovod").read_text()
    stages = [line.split('"')[1] for line in text.splitlines() if line.startswith("stage ")]
    assert len(stages) == 4
    assert 'stage() { echo "build-horovod: stage $1/4: $2" >&2; }' in text
