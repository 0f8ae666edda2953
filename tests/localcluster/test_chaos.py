"""The chaos schedule's decisions: each step waits until the previous one shows in the
training's world size, so a delete lands while the job runs at full size."""
import pytest

from localcluster.chaos import Progress, after_step, next_step, parse_steps, took_effect

STEPS = ("add", "delete", "add")


def rec(t, world, event="progress"):
    return {"event": event, "time": t, "world_size": world}


def test_first_step_waits_for_the_training_to_run():
    assert next_step(STEPS, Progress(), []) is None
    assert next_step(STEPS, Progress(), [rec(10, 2)]) == "add"


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
    with pytest.raises(ValueError, match="--steps wants a comma list of add/delete"):
        parse_steps(text)


def test_steps_parse():
    assert parse_steps("add, delete,add") == STEPS
