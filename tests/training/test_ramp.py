"""The learning rate across a 2 -> 4 reset: ramped from the old world's rate to the new
one's over ``--scale-up-ramp`` of an epoch, kept in the elastic state and the checkpoint (a
roll-back mid-ramp and a resumed job follow the same ramp), immediate on a shrink (``tests/training/ramp_job.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.trainhelp import run_env

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).parents[2]


def test_rates_across_a_2_to_4_reset_a_roll_back_and_a_shrink(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "training" / "ramp_job.py"),
                        str(tmp_path / "ckpt")],
                       capture_output=True, text=True, timeout=240, env=run_env(), cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before"] == pytest.approx(0.2)  # 0.1 x 2
    # at 0.2 epochs the world grows to 4: 0.2 -> 0.4 over half an epoch (500 samples)
    assert out["ramp"] == pytest.approx([0.2, 0.2])
    assert out["after"] == pytest.approx([0.2, 0.25, 0.3, 0.4, 0.4])
    for case in ("rolled_back", "resumed"):  # the same ramp, the same rate mid-ramp
        ramp, rate = out[case]
        assert ramp == pytest.approx([0.2, 0.2]) and rate == pytest.approx(0.3), case
    assert out["shrunk"][0] is None and out["shrunk"][1] == pytest.approx(0.2)
