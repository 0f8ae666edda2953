"""The loss scaler's state is part of the elastic state from the start: a failure before the
first commit rolls a survivor's scale back to what a joiner starts with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.trainhelp import run_env

pytestmark = [pytest.mark.timeout(300), pytest.mark.horovod]
ROOT = Path(__file__).parents[2]


def test_failure_before_the_first_commit_restores_the_initial_scale():
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "training" / "scaler_job.py")],
                       capture_output=True, text=True, timeout=240, env=run_env(), cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    scales = json.loads(r.stdout.strip().splitlines()[-1])
    assert scales["after_overflow"] == scales["entry"] / 2  # the uncommitted step changed it
    assert scales["rolled_back"] == scales["entry"]          # the roll-back undid that
    assert scales["joiner"] == scales["rolled_back"]         # a joiner scales like a survivor
