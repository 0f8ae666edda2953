"""``training.sample_audit`` on hand-built per-step sample logs: an epoch trained once is clean;
a reset's rollback is reported as re-trained, not as trained twice; a world kept through a
takeover adds nothing; a dropped step is reported as never trained, a repeated one as twice;
a crash's partial last line is skipped; a restart of the job is a rollback to where it resumed."""
from __future__ import annotations

import json
from pathlib import Path

from training.sample_audit import audit, kept_steps, load, read_lines
from training.sample_log import SampleLog

N = 8  # samples an epoch; two ranks, batch 2: steps of 4 samples at 0 and 4


def enter(world: str, t: float, epoch: int = 0, processed: int = 0, rank: int = 0) -> dict:
    return {"kind": "enter", "time": t, "world": world, "rank": rank, "size": 2, "epoch": epoch,
            "resets": 0, "processed": processed, "samples": N}


def step(world: str, t: float, start: int, indices: list[int], epoch: int = 0, rank: int = 0,
         total: int = 4) -> dict:
    return {"kind": "step", "time": t, "world": world, "rank": rank, "size": 2, "epoch": epoch,
            "resets": 0, "start": start, "total": total, "indices": indices, "samples": N}


def commit(world: str, t: float, processed: int, epoch: int = 0) -> dict:
    return {"kind": "commit", "time": t, "world": world, "rank": 0, "epoch": epoch, "resets": 0,
            "processed": processed, "commits": 1}


def epoch_of(world: str, t: float, epoch: int = 0, order=range(N)) -> list[dict]:
    """One world's two steps of a whole epoch (ranks 0 and 1), committed after each."""
    o = list(order)
    return [step(world, t, 0, o[0:4:2], epoch), step(world, t, 0, o[1:4:2], epoch, rank=1),
            commit(world, t + 0.1, 4, epoch),
            step(world, t + 1, 4, o[4:8:2], epoch), step(world, t + 1, 4, o[5:8:2], epoch, rank=1),
            commit(world, t + 1.1, 8, epoch)]


def test_an_epoch_trained_once_is_clean():
    a = audit([enter("A/0", 0), enter("A/0", 0, rank=1), *epoch_of("A/0", 1, order=[3, 1, 4, 0, 5, 2, 6, 7])])[0]
    assert a.complete and a.ok and a.trained == a.kept == N
    assert a.retrained == 0 and a.rollbacks == () and a.worlds == ("A/0",)


def test_a_reset_rolls_back_to_the_last_commit_and_reports_it_apart():
    records = [enter("A/0", 0), step("A/0", 1, 0, [0, 2]), step("A/0", 1, 0, [1, 3], rank=1),
               commit("A/0", 1.1, 4),
               step("A/0", 2, 4, [4, 6]), step("A/0", 2, 4, [5, 7], rank=1),  # never committed
               enter("A/1", 3, processed=4),  # the reset: a world of one resumes at the commit
               step("A/1", 4, 4, [4, 5, 6, 7], rank=0)]
    a = audit(records)[0]
    assert a.complete and a.ok, a.summary()
    assert a.retrained == 4 and a.trained == 12 and a.kept == N
    (r,) = a.rollbacks
    assert (r.world, r.successor, r.resumed_at, r.reached, r.samples) == ("A/0", "A/1", 4, 8, 4)


def test_a_world_kept_through_a_takeover_adds_nothing():
    # the same world's lines before and after the old launcher died: no enter, no new world
    a = audit([enter("A/0", 0), *epoch_of("A/0", 1), *epoch_of("A/0", 50, epoch=1)])
    assert all(e.ok and e.complete and e.retrained == 0 for e in a.values())
    assert [e.epoch for e in a.values()] == [0, 1]


def test_a_dropped_step_is_never_trained_and_a_repeated_one_twice():
    records = [enter("A/0", 0), *epoch_of("A/0", 1)]
    dropped = [r for r in records if not (r["kind"] == "step" and r["start"] == 4 and r["rank"] == 1)]
    a = audit(dropped)[0]
    assert a.complete and not a.ok and a.never == (5, 7) and a.twice == ()
    repeated = [*records, step("A/0", 3, 8, [0, 2], total=2)]  # a step past the end, again
    a = audit(repeated)[0]
    assert a.twice == (0, 2) and a.never == () and a.retrained == 0


def test_an_incomplete_epoch_names_nothing_never_trained():
    a = audit([enter("A/0", 0), step("A/0", 1, 0, [0, 2]), step("A/0", 1, 0, [1, 3], rank=1)])[0]
    assert not a.complete and a.never == () and a.ok


def test_a_restart_from_a_checkpoint_is_a_rollback_to_where_it_resumed():
    old = [enter("A/0", 0), *epoch_of("A/0", 1)[:3], step("A/0", 2, 4, [4, 6])]  # killed mid-step
    new = [enter("B/0", 10, processed=0), enter("B/0", 10, processed=0, rank=1), *epoch_of("B/0", 11)]
    a = audit(old + new)[0]
    assert a.ok and a.complete and a.worlds == ("A/0", "B/0")
    (r,) = a.rollbacks
    assert (r.world, r.successor, r.resumed_at, r.samples, r.time) == ("A/0", "B/0", 0, 6, 10)
    assert a.retrained == 6 and a.kept == N


def test_a_world_that_entered_an_earlier_epoch_resumes_the_next_at_its_start():
    records = [enter("A/0", 0), *epoch_of("A/0", 1), step("A/0", 5, 0, [0, 1], epoch=1),
               enter("A/1", 6, epoch=0, processed=N),  # its end-of-epoch commit was lost
               *epoch_of("A/1", 7, epoch=1)]
    a = audit(records)
    assert a[0].ok and a[0].retrained == 0
    assert a[1].ok and a[1].retrained == 2 and a[1].rollbacks[0].successor == "A/1"


def test_a_crash_leaves_a_partial_last_line_that_is_skipped(tmp_path: Path):
    log = SampleLog(str(tmp_path), "host-1", "host")
    log.enter("host-1", 0, 1, 0, 0, 0, N)
    log.step(0, 1, 0, 0, 0, 4, [0, 1, 2, 3], N)
    log.commit(0, 0, 0, 4, 1)
    log.step(0, 1, 0, 0, 4, 4, [4, 5, 6, 7], N)
    path = tmp_path / "host-1.steps"
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])  # killed mid-write
    with open(path, "a") as f:
        f.write("\n" + json.dumps([1, 2]) + "\n" + '{"kind": "step"}\n')  # not records
    records = load(tmp_path)
    assert [r.get("kind") for r in records] == ["enter", "step", "commit", "step"]
    assert len(read_lines(path)) == 4  # three whole records and the field-less object
    a = audit(records)[0]
    assert not a.complete and a.kept == 4 and a.ok
    assert records[0]["world"] == "host-1/0"


def test_the_kept_steps_leave_out_the_rolled_back_ones():
    records = [enter("A/0", 0), step("A/0", 1, 0, [0, 2]), commit("A/0", 1.1, 4),
               step("A/0", 2, 4, [4, 6]), enter("B/0", 3, processed=4), step("B/0", 4, 4, [4, 5, 6, 7])]
    assert [(r["world"], r["start"]) for r in kept_steps(records)] == [("A/0", 0), ("B/0", 4)]
