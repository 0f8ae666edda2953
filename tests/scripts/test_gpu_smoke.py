"""scripts/gpu-smoke --dry-run: every part that can run without a GPU, on the CPU with the
device path forced (hard JPEGs through the --augment-on-device path, the prefetch stress,
three Horovod init/shutdown cycles, ResNet-50 steps in fp16 and bf16, the real loop under
elastic horovodrun with one slot); one table, exit 0. Bad flags: one line, exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-smoke"
PARTS = ["versions", "arch", "horovod-nccl", "check-cuda", "jpeg-hard", "jpeg-rate", "prefetch",
         "nccl-cycles", "step-fp16", "step-bf16", "elastic-run"]


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--device", "cpu"], "is not a CUDA device"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_are_one_line_errors(argv, message):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.horovod
@pytest.mark.timeout(1800)
def test_dry_run_passes_every_part_it_can_run(tmp_path):
    # as a new user runs it: the machine's python3, no venv on PATH; it sets itself up
    # (scripts/setup, done already: seconds) and runs again under the venv's Python
    bare = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    assert bare, "no python3 on /usr/local/bin:/usr/bin:/bin"
    # the venv's python may be a link to this very file: what tells them apart is sys.prefix
    prefix = subprocess.run([bare, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert prefix and Path(prefix).resolve() != Path(sys.prefix).resolve(), (bare, prefix)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.setdefault("ELASTIC_VENV", sys.prefix)
    proc = subprocess.run([bare, str(SCRIPT), "--dry-run", "--keep", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=1700, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "gpu-smoke: scripts/setup" in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "gpu-smoke on cpu (dry run: the device path forced on the CPU)"
    assert lines[1].split() == ["part", "result", "figures", "s"]
    rows = {line.split()[0]: line.split()[1] for line in lines[2:]}
    assert list(rows) == PARTS
    assert rows["check-cuda"] == "skip"
    for part in PARTS:
        if part not in ("check-cuda", "horovod-nccl", "arch"):
            assert rows[part] == "ok", proc.stdout
    assert "5 agree with PIL" in proc.stdout
    # the training loop ran with deploy/'s flags: its snapshot and checkpoint writes, made local
    assert "with deploy/'s flags (--checkpoint-dir=" in proc.stdout
    assert any((tmp_path / "run" / "data" / ".snapshots").iterdir())
