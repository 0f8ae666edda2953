"""elastic-run stops at once, with exit 2, when every rank of the first world exits 2 before
any commit: a bad training flag used to hold the workers until the stall
watchdog (900 s) or --elastic-timeout (3600 s) ended horovodrun."""
import subprocess
import sys

import pytest

from elastic.launch.badinput import first_world_rejected
from elastic.launch.events import Record
from tests.elastic.launch.conftest import env, launcher_args


def reset(size):
    return Record(1.0, "reset", {"world_size": size, "rendezvous": 1, "hosts": [], "new_workers": size})


def exit_(code):
    return Record(2.0, "worker_exit", {"host": "h", "slot": 0, "exit_code": code})


COMMIT = Record(2.0, "progress", {"host": "h", "slot": 0, "commits": 1})


@pytest.mark.parametrize("records,expected", [
    ([reset(2), exit_(2), exit_(2)], 2),
    ([reset(3), exit_(2), exit_(2), exit_(2), exit_(1)], 3),      # later exits change nothing
    ([reset(2), exit_(2)], None),                                 # one rank still runs
    ([reset(2), exit_(2), exit_(1)], None),                       # another failure: horovodrun decides
    ([reset(2), exit_(2), exit_(143), exit_(2)], None),
    ([reset(2), COMMIT, exit_(2), exit_(2)], None),               # it trained: not its flags
    ([reset(2), exit_(2), COMMIT, exit_(2)], None),
    ([exit_(2), exit_(2)], None),                                 # no world yet
    ([reset("2"), exit_(2), exit_(2)], None),                     # an unreadable reset
    ([reset(2), exit_("2"), exit_(2)], None),
    ([reset(1), exit_(True)], None),
    ([reset(2), exit_(2), reset(1), exit_(2)], 2),                # the first world's size counts
])
def test_the_first_world_rejected_its_input_only_when_all_its_ranks_exited_2_before_a_commit(records, expected):
    assert first_world_rejected(records) == expected


@pytest.mark.timeout(400)
def test_a_bad_flag_on_every_rank_ends_elastic_run_with_2_without_waiting_for_more_hosts(two_pods, tmp_path):
    """--elastic-timeout 3600 and the default stall timeout: only the bad-input watch can end
    the run within the subprocess deadline (horovodrun would wait for other hosts)."""
    bad = [sys.executable, "-c", "import sys; print('error: unrecognized arguments: --epocs', file=sys.stderr); "
                                 "sys.exit(2)"]
    args = launcher_args(two_pods, tmp_path, "--blacklist-cooldown-range", "600", "700", "--") + bad
    args[args.index("--elastic-timeout") + 1] = "3600"
    proc = subprocess.run(args, capture_output=True, text=True, timeout=360, env=env())
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "all 2 ranks of the first world exited 2 (bad input) before any commit" in proc.stderr
