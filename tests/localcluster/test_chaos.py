"""The chaos schedule's decisions: the first step comes while the job starts (never waiting
for the training to run); each later step waits until the previous one shows in the
training's world size (metrics or the Horovod driver's events), so a delete or kill lands
while the job runs at full size."""
import pytest

from localcluster.chaos import Progress, after_step, next_step, parse_steps, took_effect
from shared.driver_events import Record
from tests.metricsrecords import metrics_record

STEPS = ("add", "delete", "add")


def rec(t, world, event="progress"):
    return metrics_record(event=event, time=t, world_size=world)


def test_first_step_is_due_at_once_or_once_the_driver_started_a_worker():
    assert next_step(STEPS, Progress(), []) == "add"  # does not wait for the training
    assert next_step(STEPS, Progress(), [], [], wait_for_start=True) is None
    started = [ev(5, "reset", world_size=2), ev(5.1, "worker_start", host="h", slot=0, rank=0)]
    assert next_step(STEPS, Progress(), [], started, wait_for_start=True) == "add"
    # the world it changes is the driver's first assignment
    assert after_step("add", Progress(), [], 6, started).expected_world == 3


def ev(t, kind, **detail):
    return Record(t, kind, detail)


def test_later_steps_can_follow_the_driver_events_of_any_script():
    events = [ev(5, "reset", world_size=2)]
    p = after_step("add", Progress(), [], 6, events)
    events += [ev(9, "reset", world_size=3)]
    assert not took_effect(p, [], events)  # reset, but nobody trained at 3 yet
    events += [ev(12, "progress", host="h", slot=0, commits=4)]
    assert next_step(("add", "kill"), p, [], events) == "kill"
    p = after_step("kill", p, [], 13, events)
    assert p.expected_world == 2
    assert not took_effect(p, [], events + [ev(14, "progress", commits=5)])  # still size 3
    assert took_effect(p, [], events + [ev(15, "reset", world_size=2), ev(16, "progress", commits=6)])


def test_each_later_step_waits_for_the_expected_world_size_after_the_previous():
    records = [rec(10, 2)]
    p = after_step("add", Progress(), records, now=11)
    assert p == Progress(done=1, last_time=11, expected_world=3)
    # still at 2 after the add (the new worker has not joined yet)
    records.append(rec(12, 2))
    assert next_step(STEPS, p, records) is None
    # an old record at 3 from before the step does not count
    assert not took_effect(p, [rec(9, 3)])
    records.append(rec(20, 3))
    assert next_step(STEPS, p, records) == "delete"
    p = after_step("delete", p, records, now=21)
    assert p.expected_world == 2
    assert next_step(STEPS, p, records + [rec(22, 3)]) is None
    assert next_step(STEPS, p, records + [rec(22, 3), rec(30, 2)]) == "add"
    p = after_step("add", p, records, now=31)
    assert next_step(STEPS, p, records + [rec(40, 3)]) is None  # all done
    assert took_effect(p, [rec(40, 3)])


@pytest.mark.parametrize("text", ["", "add,explode", ",,"])
def test_bad_steps_are_refused(text):
    with pytest.raises(ValueError, match="--steps wants a comma list of add/delete/kill"):
        parse_steps(text)


def test_steps_parse():
    assert parse_steps("add, delete,add") == STEPS
    assert parse_steps("add,kill") == ("add", "kill")


def test_a_first_step_before_any_world_size_counts_from_the_ready_pods(cluster):
    """A pod added while the job starts (no metrics, no driver events yet) must expect one
    more than the pods there are, not a world of 1."""
    from localcluster.chaos import ready_pods

    for name in ("worker-0", "worker-1"):
        cluster.create_pod(name)
        cluster.wait_ready(name)
    start = ready_pods(str(cluster.state_dir))
    assert start == 2
    assert after_step("add", Progress(), [], 0.0, [], start).expected_world == 3
