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

pytestmark = [pytest.mark.timeout(300), pytest.mark.horovod]
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


def test_rates_in_a_real_elastic_scale_up(tmp_path):
    """horovodrun 2 -> 3: the rate ramps from 0.1 x 2 to 0.1 x 3 over a quarter epoch after the
    scale-up (before: it jumped to 0.3 at the first step at 3), on every rank alike.
    With weight decay and momentum, the joiner ends with the same parameters as the others
    (check_finished_run): Horovod's broadcast_optimizer_state steps a joiner's fresh optimizer
    with zero gradients, and with weight decay that moved its weights after they were synced
    (training/state.py; on the GPU path: test_gpu_path.py)."""
    from tests.training.trainhelp import LocalScaleUp, check_finished_run, train_args

    n = 960
    argv = [*train_args("mnist", Path("unused"), tmp_path, 1)[:3], "--synthetic",
            "--synthetic-size", str(n), "--epochs", "1", "--batch-size", "8", "--lr", "0.1",
            "--scale-up-ramp", "0.25", "--commit-every", "2", "--host-check-every", "1",
            "--log-every", "2", "--workers", "0", "--weight-decay", "0.01", "--momentum", "0.9",
            "--trace-dir", str(tmp_path / "trace"), "--metrics-file", str(tmp_path / "metrics.jsonl"),
            "--debug-step-delay", "0.2"]
    run = LocalScaleUp(tmp_path, argv)
    try:
        assert run.scale_up_after(64) == 0, run.job.output()[-4000:]
    finally:
        run.job.stop()
    records = check_finished_run(tmp_path, n, 1, final_world=3)
    progress = [r for r in records if r.event == "progress"]
    at2 = [r.lr for r in progress if r.world_size == 2]
    at3 = [(r.samples, r.lr) for r in progress if r.world_size == 3]
    assert at2 and all(lr == pytest.approx(0.2) for lr in at2)
    assert at3
    rates = [lr for _, lr in at3]
    assert rates == sorted(rates) and max(rates) <= 0.3 + 1e-9  # no jump down, no overshoot
    assert any(0.2 < lr < 0.3 - 1e-9 for lr in rates), at3  # the ramp, not a jump
    # linear in the samples trained since the scale-up (a record's rate is the one set before
    # its last step of 24 samples): 0.1 more per quarter epoch (240 samples), then flat
    (s1, lr1) = at3[0]
    start = s1 - 24 - (lr1 - 0.2) / 0.1 * 240
    for samples, lr in at3:
        assert lr == pytest.approx(0.2 + 0.1 * min(1.0, (samples - 24 - start) / 240)), at3
