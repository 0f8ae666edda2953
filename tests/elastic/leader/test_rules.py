"""The election's pure core (elastic.leader.rules): who may write the Lease when, by the time
this candidate observed, never by the timestamps another machine wrote; a leader leads until
its renew deadline after the start of its last successful write and not a moment longer."""
import pytest

from elastic.errors import BadLease
from elastic.leader.rules import (
    FINISHED_ANNOTATION,
    Create,
    Election,
    Finished,
    LeaseView,
    Timings,
    Update,
    Wait,
    lease_view,
)

T = Timings(lease_duration=3, renew_deadline=2, retry_period=0.5)


def view(holder="b", rv="1", renew="2026-01-01T00:00:00.000000Z", duration=3, finished=None, transitions=0):
    return LeaseView(resource_version=rv, holder=holder, duration=duration, renew_time=renew,
                     transitions=transitions, finished=finished)


def test_no_lease_is_created_and_the_write_makes_a_leader_until_the_renew_deadline():
    a = Election("a", T)
    a.observe(None, 100.0)
    assert a.decide(100.0) == Create()
    a.won(100.0, view("a", rv="2"))
    assert a.leading(101.9) and not a.leading(102.0)  # 2 s after the write *started*
    assert a.decide(101.0) == Update("2", acquire=False, transitions=0, acquire_time=None)


def test_a_live_holder_is_waited_for_a_lease_duration_from_when_its_record_was_observed():
    a = Election("a", T)
    a.observe(view("b", rv="5"), 100.0)
    assert a.decide(102.9) == Wait("b", 103.0)
    a.observe(view("b", rv="6"), 102.9)  # b renewed: the wait starts again from this observation
    assert isinstance(a.decide(105.8), Wait)
    a.observe(view("b", rv="6"), 105.9)  # unchanged since 102.9: expired
    assert a.decide(105.9) == Update("6", acquire=True, transitions=1)


def test_clock_skew_is_not_trusted_the_renew_time_written_is_never_compared():
    """The record says b renewed an hour ago (b's clock is behind, or ours ahead): b is still
    live until it has not changed for a lease duration by our observation."""
    a = Election("a", T)
    a.observe(view("b", renew="2020-01-01T00:00:00.000000Z"), 100.0)
    assert isinstance(a.decide(100.1), Wait)
    a.observe(view("b", rv="2", renew="2099-01-01T00:00:00.000000Z"), 100.2)  # a clock far ahead
    a.observe(view("b", rv="2", renew="2099-01-01T00:00:00.000000Z"), 103.3)
    assert a.decide(103.3) == Update("2", acquire=True, transitions=1)


def test_a_holder_that_wrote_a_longer_lease_is_given_it():
    a = Election("a", T)
    a.observe(view("b", duration=30), 0.0)
    assert a.decide(29.0) == Wait("b", 30.0)


def test_a_released_lease_is_taken_at_once():
    a = Election("a", T)
    a.observe(view(""), 0.0)
    assert a.decide(0.0) == Update("1", acquire=True, transitions=1)


def test_a_leader_that_sees_another_holder_stops_leading_at_once():
    a = Election("a", T)
    a.won(100.0, view("a", rv="2"))
    a.observe(view("b", rv="3"), 100.5)  # b took it (a was paused; its renew deadline had passed)
    assert not a.leading(100.6) and a.lost_to == "b"
    assert isinstance(a.decide(100.6), Wait)


def test_a_paused_leader_is_not_leading_on_wake_before_any_read():
    """SIGSTOP for longer than the renew deadline: the fence must know before any I/O."""
    a = Election("a", T)
    a.won(100.0, view("a", rv="2"))
    assert a.leading(101.0)
    assert not a.leading(130.0)  # woke up: nothing read yet, already not leading


def test_a_stale_resource_version_is_what_the_loser_of_a_race_writes_over():
    """Both candidates saw rv 7 expire and decide to take it over rv 7; the API lets one write
    (rv 8) and answers the other 409: the loser's next read shows the winner, live."""
    a, b = Election("a", T), Election("b", T)
    for c in (a, b):
        c.observe(view("old", rv="7"), 0.0)
        c.observe(view("old", rv="7"), 3.0)
    assert a.decide(3.0) == b.decide(3.0) == Update("7", acquire=True, transitions=1)
    b.won(3.0, view("b", rv="8", transitions=1))
    a.observe(view("b", rv="8", transitions=1), 3.1)  # a's write over rv 7 was refused (409)
    assert a.decide(3.1) == Wait("b", 6.1) and not a.leading(3.1)


def test_a_finished_mark_stops_a_standby_that_saw_the_leader_but_not_a_late_comer():
    standby = Election("a", T)
    standby.observe(view("b"), 0.0)
    standby.observe(view("", rv="2", finished=0), 1.0)
    assert standby.decide(1.0) == Finished("", 0)
    late = Election("c", T)  # a later run of the job: an earlier one finished
    late.observe(view("", rv="2", finished=0), 5.0)
    assert late.decide(5.0) == Update("2", acquire=True, transitions=1)


@pytest.mark.parametrize("kwargs, message", [
    ({"lease_duration": 3, "renew_deadline": 3, "retry_period": 1}, "renew deadline"),
    ({"lease_duration": 3, "renew_deadline": 2, "retry_period": 2}, "retry period"),
    ({"lease_duration": 0, "renew_deadline": 2, "retry_period": 1}, "lease_duration"),
    ({"lease_duration": 5000, "renew_deadline": 2, "retry_period": 1}, "lease_duration"),
])
def test_timings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Timings(**kwargs)


def test_identity_is_checked():
    with pytest.raises(ValueError, match="identity"):
        Election("a b; rm -rf", T)


def lease(**spec):
    return {"metadata": {"resourceVersion": "4", "annotations": {FINISHED_ANNOTATION: "0"}},
            "spec": {"holderIdentity": "b", "leaseDurationSeconds": 3, "leaseTransitions": 2, **spec}}


def test_a_lease_from_the_api_is_checked_field_by_field():
    assert lease_view(lease()) == LeaseView("4", "b", 3.0, 2, None, None, 0)
    for bad, field in (({"leaseDurationSeconds": True}, "leaseDurationSeconds"),
                       ({"leaseDurationSeconds": 10**9}, "leaseDurationSeconds"),
                       ({"leaseTransitions": -1}, "leaseTransitions"),
                       ({"holderIdentity": ["x"]}, "holderIdentity"),
                       ({"holderIdentity": "x" * 300}, "holderIdentity")):
        with pytest.raises(BadLease, match=field):
            lease_view(lease(**bad))
    with pytest.raises(BadLease, match="resourceVersion"):
        lease_view({"metadata": {}, "spec": {}})
    with pytest.raises(BadLease, match=FINISHED_ANNOTATION):
        lease_view({"metadata": {"resourceVersion": "1", "annotations": {FINISHED_ANNOTATION: "-1; x"}}})
