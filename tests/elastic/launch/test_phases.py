"""elastic.launch.phases: the start-up line a launcher prints at its first commit, from its own
times and the driver's events (built by hand here; the e2e restart test reads the real one)."""
from __future__ import annotations

from elastic.launch.decisions import Note, Tick
from elastic.launch.events import Record
from elastic.launch.phases import Marks, PhasePolicy, first_served, phases, render


def rec(t: float, kind: str, host: str = "h1", slot: int = 0) -> Record:
    return Record(t, kind, {"host": host, "slot": slot})


WORLD = [rec(104.0, "worker_start", "h1"), rec(104.5, "worker_start", "h2"),
         rec(123.0, "worker_registered", "h1"), rec(124.0, "worker_registered", "h2"),
         rec(125.0, "worker_registered", "h1")]  # a later world's: not the first
MARKS = Marks(100.0, 101.0, 103.0, 126.0)


def test_each_phase_runs_from_the_end_of_the_one_before_to_the_last_worker_of_the_first_world():
    assert phases(MARKS, WORLD, 2) == [
        ("discovery daemon", 1.0), ("hosts prepared", 2.0), ("workers started", 1.5), ("imports and setup", 19.5),
        ("first step", 2.0)]


def test_overlapping_phases_count_zero_and_unknown_ones_are_none():
    # the hosts were served before the daemon's own mark (an external daemon); one worker registered
    marks = Marks(100.0, 105.0, 103.0, 126.0)
    got = dict(phases(marks, WORLD[:3], 2))
    assert got["hosts prepared"] == 0.0
    assert got["imports and setup"] is None
    assert got["first step"] == 126.0 - 105.0


def test_the_line_names_every_phase_and_waits_for_the_first_commit():
    assert render(Marks(100.0, 101.0, 103.0), WORLD, 2) is None
    assert render(MARKS, WORLD, 2) == (
        "training 26.0 s after the start: discovery daemon 1.0 s, hosts prepared 2.0 s (ssh pinning, earlier "
        "runs stopped, dataset), workers started 1.5 s, imports and setup 19.5 s, first step 2.0 s")


def test_served_is_when_the_hosts_first_held_the_slots():
    snaps = [(1.0, ["a:1"]), (2.0, ["a:1", "b:1"]), (3.0, ["a:1"])]
    count = len
    assert first_served(snaps, 2, count) == 2.0
    assert first_served(snaps, 3, count) is None


def test_the_policy_notes_the_line_once_at_the_first_step():
    trained: list[float] = []
    policy = PhasePolicy(lambda: Marks(100.0, 101.0, 103.0, trained[0] if trained else None), 2)
    assert policy.step(WORLD, Tick(0.0, 0.0)) == [] and not policy.done
    trained.append(126.0)
    [note] = policy.step([], Tick(0.0, 0.0))
    assert isinstance(note, Note) and note.line.startswith("training 26.0 s after the start") and policy.done
    assert policy.step([], Tick(0.0, 0.0)) == []
