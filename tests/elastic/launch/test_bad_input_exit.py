"""elastic-run exits 2 (bad input) when every training process exited 2, e.g. a bad training
flag on every worker: horovodrun turns the workers' 2 into its own 1, which the launcher Job
would retry for up to an hour; on 2 its podFailurePolicy fails the Job at once."""
import subprocess
import sys

import pytest

from elastic.launch.events import Record
from elastic.launch.runner import bad_input_exit
from tests.elastic.launch.conftest import env, launcher_args


def exits(*codes):
    return [Record(1.0, "hosts", {}), *(Record(2.0, "worker_exit", {"host": "h", "slot": 0, "exit_code": c})
                                        for c in codes)]


@pytest.mark.parametrize("code,driver,expected", [
    (1, exits(2, 2), 2),
    (1, exits(2), 2),
    (1, exits(2, 1), 1),           # one worker failed for another reason
    (1, exits(2, 143), 1),         # one left on SIGTERM
    (1, exits(), 1),               # nobody exited: horovodrun's own failure
    (1, [], 1),
    (0, exits(2, 2), 0),           # the job succeeded anyway
    (143, exits(2, 2), 143),       # ended by a signal
    (1, exits("2", None), 1),      # not an exit code
])
def test_the_exit_code_is_2_only_when_every_worker_exited_2(code, driver, expected):
    assert bad_input_exit(code, driver) == expected


@pytest.mark.timeout(400)
def test_a_training_that_rejects_its_flags_on_every_worker_makes_elastic_run_exit_2(two_pods, tmp_path):
    bad = [sys.executable, "-c", "import sys; print('error: unrecognized arguments: --epocs', file=sys.stderr); "
                                 "sys.exit(2)"]
    proc = subprocess.run(launcher_args(two_pods, tmp_path, "--elastic-timeout", "20",
                                        "--blacklist-cooldown-range", "600", "700", "--") + bad,
                          capture_output=True, text=True, timeout=360, env=env())
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "unrecognized arguments" in proc.stderr + proc.stdout
