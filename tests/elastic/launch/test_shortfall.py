"""elastic.launch.shortfall: at the first-world deadline, capacity (75) or failing workers (69),
judged from the daemon's hosts document. The end-to-end cases are
tests/e2e/test_first_world_verdict.py."""
import pytest

from elastic.launch.shortfall import ShortfallTracker, judge
from shared.exitcodes import EXIT_NO_CAPACITY, EXIT_WORKERS_FAILING
from shared.hosts_document import HostsDocument, PreparingHost, ServedHost, SkippedPod, WaitingPod

SERVED = (ServedHost("10.0.0.1", 1, pod="w-0"),)
UNPLACED = WaitingPod("w-1", "not scheduled", detail="Unschedulable: 0/3 nodes are available")
CRASHING = WaitingPod("w-2", "failing", detail="container worker CrashLoopBackOff (4 restarts, last exit 1)")
PULL = WaitingPod("w-3", "failing", detail="container worker ImagePullBackOff")
UNREADY = WaitingPod("w-4", "not ready")
PREP_FAILED = SkippedPod("w-5", "prepare failed after 3 attempts: exit 1: rsync: mkdir failed (next try in 30 s)")
PREPARING = PreparingHost("10.0.0.6", "w-6")


def doc(*, hosts=SERVED, waiting=(), preparing=(), skipped=(), counts=None) -> HostsDocument:
    counts = counts if counts is not None else {w.reason: sum(1 for x in waiting if x.reason == w.reason)
                                                for w in waiting}
    return HostsDocument(synced=True, hosts=hosts, waiting_pods=tuple(waiting), preparing=tuple(preparing),
                         skipped=tuple(skipped), waiting=counts)


# (case, document, when each placed pod was first seen, expected exit code, parts of the reason)
CASES = [
    ("only unscheduled pods: capacity", doc(waiting=[UNPLACED]), {}, EXIT_NO_CAPACITY,
     ["1 of the 2 slots", "lack capacity", "w-1: not scheduled (Unschedulable: 0/3 nodes are available)"]),
    ("no pod beyond those served: capacity (quota, a full ReplicaSet)", doc(), {}, EXIT_NO_CAPACITY,
     ["no worker pod exists beyond those served"]),
    ("crash-looping beside unscheduled: failing", doc(waiting=[UNPLACED, CRASHING]), {}, EXIT_WORKERS_FAILING,
     ["not for lack of capacity", "w-2: failing (container worker CrashLoopBackOff (4 restarts, last exit 1))"]),
    ("image pull error: failing", doc(waiting=[PULL]), {}, EXIT_WORKERS_FAILING, ["w-3: failing", "ImagePullBackOff"]),
    ("preparation failed: failing", doc(skipped=[PREP_FAILED]), {}, EXIT_WORKERS_FAILING,
     ["w-5: prepare failed after 3 attempts: exit 1: rsync: mkdir failed"]),
    ("placed and unready for a short while: capacity came late", doc(waiting=[UNREADY]), {"w-4": 950.0},
     EXIT_NO_CAPACITY, ["w-4: not ready"]),
    ("placed and unready past the bound: failing", doc(waiting=[UNREADY]), {"w-4": 100.0},
     EXIT_WORKERS_FAILING, ["w-4: not ready for 900 s"]),
    ("being prepared past the bound (a sync longer than the deadline): failing", doc(preparing=[PREPARING]),
     {"w-6": 0.0}, EXIT_WORKERS_FAILING, ["w-6: being prepared (SSH host key, dataset sync) for 1000 s"]),
    ("being prepared briefly: capacity", doc(preparing=[PREPARING]), {"w-6": 990.0}, EXIT_NO_CAPACITY,
     ["w-6: being prepared"]),
    ("more pods than the daemon names are counted", doc(waiting=[UNPLACED], counts={"not scheduled": 7}), {},
     EXIT_NO_CAPACITY, ["6 more pods not served"]),
]


@pytest.mark.parametrize("case, document, placed, code, parts", CASES, ids=[c[0] for c in CASES])
def test_the_verdict_at_the_deadline(case, document, placed, code, parts):
    verdict = judge(document, 2, placed, None, now=1000.0, ready_timeout=600.0)
    assert verdict.exit_code == code, verdict.reason
    for part in parts:
        assert part in verdict.reason


def test_a_daemon_that_never_listed_the_pods_is_no_proof_of_missing_capacity():
    for document in (None, HostsDocument(synced=False)):
        verdict = judge(document, 2, {}, None, 1000.0, 600.0)
        assert verdict.exit_code == EXIT_WORKERS_FAILING and "never listed" in verdict.reason


def test_enough_slots_served_is_a_world_forming_until_the_bound_then_workers_that_do_not_start():
    both = doc(hosts=SERVED * 2)
    assert judge(both, 2, {}, served_since=900.0, now=1000.0, ready_timeout=600.0).exit_code is None
    late = judge(both, 2, {}, served_since=300.0, now=1000.0, ready_timeout=600.0)
    assert late.exit_code == EXIT_WORKERS_FAILING and "2 slots were served for 700 s but no world formed" in late.reason


def test_many_failing_pods_are_named_five_at_a_time():
    failing = [WaitingPod(f"w-{i}", "failing", detail="CrashLoopBackOff") for i in range(8)]
    verdict = judge(doc(waiting=failing), 2, {}, None, 1000.0, 600.0)
    assert verdict.reason.count("CrashLoopBackOff") == 5 and verdict.reason.endswith("and 3 more")


def test_hostile_text_from_the_daemon_is_printed_as_one_short_line():
    evil = WaitingPod("w\n-1", "failing", detail="\x1b[2J" + "x" * 1000)
    verdict = judge(doc(waiting=[evil]), 2, {}, None, 1000.0, 600.0)
    assert verdict.reason.isprintable() and len(verdict.reason) < 600


def test_the_tracker_times_each_placed_pod_from_when_it_was_first_seen_placed():
    tracker = ShortfallTracker(min_slots=2, ready_timeout=60.0)
    tracker.see(0.0, doc(waiting=[UNPLACED]))                       # no place yet: not timed
    tracker.see(10.0, doc(waiting=[WaitingPod("w-1", "not running")]))  # placed at 10
    tracker.see(50.0, OSError("daemon restarting"))                  # a failed look changes nothing
    tracker.see(65.0, doc(waiting=[WaitingPod("w-1", "not ready")]))     # still placed, since 10
    assert tracker.verdict(69.0).exit_code == EXIT_NO_CAPACITY
    assert tracker.verdict(70.0).exit_code == EXIT_WORKERS_FAILING
    assert "w-1: not ready for 60 s" in tracker.verdict(70.0).reason
    tracker.see(71.0, doc(hosts=SERVED * 2))                         # served: the world is forming
    assert tracker.verdict(100.0).exit_code is None
    assert tracker.verdict(131.0).exit_code == EXIT_WORKERS_FAILING  # served 60 s, no world


def test_the_tracker_refuses_a_bound_that_is_no_time():
    with pytest.raises(ValueError, match="ready_timeout must be positive"):
        ShortfallTracker(2, 0)
