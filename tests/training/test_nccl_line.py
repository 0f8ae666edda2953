"""A line at start when the GPU path runs on a Horovod built without NCCL (its GPU gradients
would be staged through host memory and reduced by Gloo, with no other sign of it). This
machine's Horovod has no NCCL: the GPU path forced on the CPU shows the line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from training.gpu_defaults import nccl_missing_line

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("gpu_path, nccl, shown", [
    (True, False, True), (True, True, False), (False, False, False), (False, True, False),
])
def test_when_the_line_is_shown(gpu_path, nccl, shown):
    line = nccl_missing_line(gpu_path, nccl)
    assert (line is not None) is shown
    if shown:
        assert "without NCCL" in line and "\n" not in line


@pytest.mark.horovod
@pytest.mark.timeout(600)
def test_the_forced_gpu_path_says_so_at_start(tmp_path):
    import horovod.torch as hvd

    if hvd.nccl_built():
        pytest.skip("this Horovod has NCCL")
    proc = subprocess.run(
        [sys.executable, "-m", "training.mnist", "--synthetic", "--synthetic-size", "32",
         "--epochs", "1", "--batch-size", "16", "--workers", "0", "--debug-gpu-path"],
        cwd=ROOT, capture_output=True, text=True, timeout=540, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if "without NCCL" in x]
    assert lines == ["training: " + str(nccl_missing_line(True, False))]
