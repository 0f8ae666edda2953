"""training.commits: which traced samples a job committed, from both phases of ``.samples``."""
from __future__ import annotations

from training import commits


def line(phase, rank, processed, t, resets=0, epoch=0, indices=None):
    rec = {"phase": phase, "epoch": epoch, "time": t, "size": 2, "rank": rank, "resets": resets,
           "processed": processed}
    return rec | ({"indices": indices} if indices is not None else {})


def test_a_commit_marked_by_one_rank_holds_every_ranks_trained_samples_at_the_marks_time():
    lines = [line("trained", 0, 4, 10.0, indices=[0, 1]), line("trained", 1, 4, 10.1, indices=[2, 3]),
             line("committed", 1, 4, 10.7), line("committed", 0, 4, 10.5)]
    got = commits.committed(lines)
    assert [r["indices"] for r in got] == [[0, 1], [2, 3]]
    assert {r["time"] for r in got} == {10.5}
    assert all("phase" not in r for r in got)
    assert commits.committed(got) == got  # read again: the same records
    assert commits.per_epoch(lines) == {0: [0, 1, 2, 3]}


def test_an_unmarked_commit_counts_nothing_and_its_name_in_another_world_is_another_commit():
    lines = [line("trained", 0, 4, 10.0, indices=[0, 1]), line("trained", 1, 4, 10.0, indices=[2, 3]),
             # the collective failed: no mark. The next world (one more reset) marks its own
             # commit at the same processed count
             line("trained", 0, 4, 20.0, resets=1, indices=[0, 1, 2, 3]), line("committed", 0, 4, 20.2, resets=1)]
    assert commits.per_epoch(lines) == {0: [0, 1, 2, 3]}


def test_records_without_a_phase_count_as_written_and_a_broken_one_is_skipped():
    old = {"epoch": 1, "time": 5.0, "size": 1, "rank": 0, "indices": [7]}
    broken = {"phase": "trained", "time": 6.0, "indices": [8]}  # no epoch, no processed
    assert commits.committed([broken, old]) == [old]
