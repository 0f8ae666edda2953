"""The CPU decode path on the GPU path (``--debug-gpu-path``, loading processes decode):
batch k+1 is copied to the device and normalised by the prefetcher (``training.prefetch``,
on CUDA on its side stream from pinned memory) while step k runs, as with
``--augment-on-device``; before, the copy ran on the step's stream after the step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.trainhelp import run_env, write_tiny_imagenet

pytestmark = [pytest.mark.timeout(600), pytest.mark.horovod]
ROOT = Path(__file__).parents[2]


def test_batch_k_plus_1_is_made_ready_by_the_prefetcher_during_step_k(tmp_path):
    root = write_tiny_imagenet(tmp_path / "tiny", classes=3, per_class=4, val_per_class=1)
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "training" / "prefetch_job.py"),
                        str(root)], capture_output=True, text=True, timeout=540, env=run_env(),
                       cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["steps"] == 3 and got["uint8_batches"]  # 12 images, 4 per step, uint8 crops
    assert got["timed_out"] == [], got
    # inside step k, batches 0..k+1 (at least) were ready: k+1 was made while step k ran
    assert all(n >= k + 2 for k, n in enumerate(got["ready"][:-1])), got
    assert got["threads"] == ["prefetch"] * got["steps"], got
    assert got["dtypes"] == ["torch.bfloat16"] * got["steps"], got  # normalised on the device
