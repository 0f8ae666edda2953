"""elastic.driver.liveness: the failure detector's rules, one case each, in plain time."""
from __future__ import annotations

from elastic.driver.liveness import Liveness, Lose, Ping, Rebaseline, Settings

S = Settings(timeout=5.0, ping_timeout=1.0, interval=1.0, lag_limit=1.0)


def run(det: Liveness, until: float, answers, start: float = 0.0, step: float = 0.25):
    """Tick every step; each Ping is sent at once and, per answers(key, t), answered within
    0.01 s or failed at its deadline. Returns the decisions that are not pings, with times."""
    pending: list[tuple[float, object, float, bool]] = []
    out = []
    t = start
    while t <= until:
        for item in sorted(p for p in pending if p[0] <= t):
            pending.remove(item)
            when, key, sent, ok = item
            (det.answered if ok else det.failed)(key, sent)
        decisions, _ = det.tick(t)
        for d in decisions:
            if isinstance(d, Ping):
                for key in d.keys:
                    ok = answers(key, t)
                    pending.append((t + (0.01 if ok else S.ping_timeout), key, t, ok))
            else:
                out.append((t, d))
        t = round(t + step, 6)
    return out


def test_a_world_that_answers_loses_nobody():
    det = Liveness(S)
    det.watch(["a", "b", "c"], 0.0)
    assert run(det, 60.0, lambda k, t: True) == []


def test_a_frozen_worker_is_lost_within_its_bound_and_alone():
    det = Liveness(S)
    det.watch(["a", "b", "c"], 0.0)
    out = run(det, 20.0, lambda k, t: k != "b" or t < 10.0)
    (t, lose), = out
    assert isinstance(lose, Lose) and lose.keys == ("b",)
    # nothing heard for the timeout since its last answer (sent up to a round before the freeze)
    assert 10.0 + S.timeout - S.interval <= t <= 10.0 + S.timeout + S.interval + 2 * S.ping_timeout


def test_a_silent_worker_is_lost_at_its_deadline_not_at_the_next_round():
    """Its second ping goes when it can still fail by the timeout, not at the next round: with
    60 s rounds and a 2 s timeout, a worker frozen from the start is lost at about 2 s (it was
    lost at the next round, 60 s, when only rounds sent pings)."""
    det = Liveness(Settings(timeout=2.0, ping_timeout=1.0, interval=60.0))
    det.watch(["a", "b"], 0.0)
    out = run(det, 70.0, lambda k, t: k != "b")
    (t, lose), = out
    assert isinstance(lose, Lose) and lose.keys == ("b",)
    assert t <= 2.0 + 0.25, t


def test_a_retry_that_is_answered_keeps_the_worker_and_pings_stay_on_their_rounds():
    """A fluke (one failed ping, the retry answered) loses nobody, and a worker that answers
    is pinged once a round, never between."""
    det = Liveness(Settings(timeout=5.0, ping_timeout=1.0, interval=10.0))
    det.watch(["a"], 0.0)
    pings = []
    det.tick(0.0)
    det.failed("a", 0.0)  # the first ping, a fluke
    for t in (1.0, 3.0, 4.0):
        decisions, due = det.tick(t)
        pings += [t for d in decisions if isinstance(d, Ping)]
        if t == 1.0:
            assert due == 4.0  # its retry: last seen at 0, 5 s timeout, 1 s ping deadline
    assert pings == [4.0]
    det.answered("a", 4.0)
    for t in (5.0, 6.0, 9.0):
        decisions, due = det.tick(t)
        assert decisions == [] and due == 10.0, (t, decisions, due)
    assert not det.suspected("a")


def test_a_silent_majority_is_lost_while_the_others_answer():
    det = Liveness(S)
    det.watch(["a", "b", "c"], 0.0)
    out = run(det, 30.0, lambda k, t: k == "a" or t < 10.0)
    assert [type(d) for _, d in out] == [Lose]
    assert out[0][1].keys == ("b", "c") and out[0][0] <= 10.0 + 9.0


def test_a_total_silence_is_forgiven_once_then_lost():
    det = Liveness(S)
    det.watch(["a", "b"], 0.0)
    out = run(det, 40.0, lambda k, t: t < 10.0)
    assert [type(d) for _, d in out] == [Rebaseline, Lose]
    assert "all 2 workers silent" in out[0][1].reason
    assert out[1][1].keys == ("a", "b") and out[1][0] <= 10.0 + 2 * 9.0


def test_an_answer_from_anyone_ends_the_forgiveness():
    det = Liveness(S)
    det.watch(["a"], 0.0)
    # silent 10-17 s (forgiven), answers 17-30 s, silent again from 30 s: forgiven again
    out = run(det, 38.0, lambda k, t: not (10.0 <= t < 17.0 or t >= 30.0))
    assert [type(d) for _, d in out] == [Rebaseline, Rebaseline]


def test_a_lag_rebaselines_and_what_was_missed_counts_for_nothing():
    det = Liveness(S)
    det.watch(["a", "b"], 0.0)
    det.tick(0.0)
    det.failed("a", 0.5)
    det.failed("a", 1.5)
    decisions, _ = det.tick(6.0, late=5.0)  # the driver slept 5 s too long
    assert [type(d) for d in decisions if not isinstance(d, Ping)] == [Rebaseline]
    assert not det.suspected("a")
    det.failed("a", 5.9)  # a ping sent before the re-baseline proves nothing
    assert not det.suspected("a")


def test_one_failed_ping_and_a_queued_one_lose_nobody():
    """A worker whose one ping failed is not lost while its next ping waits unsent, however
    long: only a sent ping can fail."""
    det = Liveness(S)
    det.watch(["a"], 0.0)
    det.tick(0.0)
    det.failed("a", 0.0)
    decisions, _ = det.tick(1.0)  # its next ping is queued, never sent
    for t in (2.0, 5.0, 10.0, 30.0):
        decisions, _ = det.tick(t)
        assert not [d for d in decisions if isinstance(d, Lose)], t
    det.answered("a", 30.5)
    assert not det.suspected("a")


def test_a_progress_report_counts_as_an_answer_and_spares_pings():
    det = Liveness(S)
    det.watch(["a"], 0.0)
    det.heard("a", 0.5)
    decisions, _ = det.tick(1.0)
    assert not [d for d in decisions if isinstance(d, Ping)]  # heard lately: no ping
    decisions, _ = det.tick(0.5 + S.heard_window)
    assert [d for d in decisions if isinstance(d, Ping)]


def test_a_worker_that_left_the_world_is_forgotten():
    det = Liveness(S)
    det.watch(["a", "b"], 0.0)
    det.watch(["a"], 1.0)
    det.failed("b", 1.5)
    assert det.watched == {"a"} and not det.suspected("b")


def test_the_next_tick_is_due_at_the_next_round_or_an_expiry():
    det = Liveness(Settings(timeout=5.0, ping_timeout=1.0, interval=10.0))
    det.watch(["a"], 0.0)
    _, due = det.tick(0.0)
    assert due == 10.0
    det.failed("a", 0.0)
    det.failed("a", 1.0)
    _, due = det.tick(2.0)
    assert due == 5.0  # last seen at 0: it expires at 5, before the next round


def test_silent_since_is_the_first_failed_pings_send_time_until_an_answer_or_a_rebaseline():
    """What the driver copies into the fork's ``unanswered_since`` (its leave path and aborts
    read it): one truth with the rules, cleared by an answer, a report or a re-baseline, and
    never set by a ping sent before the re-baseline."""
    det = Liveness(S)
    det.watch(["a"], 0.0)
    assert det.silent_since("a") is None and det.silent_since("nobody") is None
    det.failed("a", 1.0)
    det.failed("a", 2.0)
    assert det.silent_since("a") == 1.0
    det.answered("a", 2.5)
    assert det.silent_since("a") is None
    det.failed("a", 3.0)
    det.heard("a", 3.5)
    assert det.silent_since("a") is None
    det.failed("a", 4.0)
    det.tick(9.0, late=5.0)  # re-baseline at 9
    assert det.silent_since("a") is None
    det.failed("a", 8.5)  # sent before the re-baseline: proves nothing
    assert det.silent_since("a") is None
