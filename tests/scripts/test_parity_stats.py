"""scripts/benchmarks/parity_stats.py: when bench-parity's next elastic step is due, and its summary."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"))

from parity_stats import Row, due, fraction_done, settled, summarize, table  # noqa: E402

from localcluster.chaos import Progress  # noqa: E402
from shared.driver_events import Record  # noqa: E402
from shared.metrics_record import MetricsRecord  # noqa: E402
from tests.metricsrecords import metrics_record  # noqa: E402

STEPS, AT = ("add", "kill", "add"), (0.15, 0.40, 0.60)


def progress(epoch: int, samples: int, world: int = 2, t: float = 10.0, event: str = "progress") -> MetricsRecord:
    return metrics_record(event=event, epoch=epoch, samples=samples, world_size=world, time=t)


def test_fraction_done_counts_finished_epochs_and_the_current_one():
    assert fraction_done([], 4, 100) == 0.0
    assert fraction_done([progress(1, 50)], 4, 100) == pytest.approx(0.125)
    assert fraction_done([progress(1, 50), progress(1, 100, event="epoch"), progress(2, 20)], 4, 100) \
        == pytest.approx(0.3)
    # a rollback after a kill does not move the run backwards
    assert fraction_done([progress(2, 60), progress(2, 40)], 4, 100) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        fraction_done([], 0, 100)


def test_the_first_step_waits_for_its_share_of_the_run():
    assert due(STEPS, AT, Progress(), [progress(1, 50)], [], 4, 100) is None  # 12.5 % < 15 %
    assert due(STEPS, AT, Progress(), [progress(1, 70)], [], 4, 100) == "add"


def test_a_later_step_waits_until_the_previous_took_effect_and_for_its_share():
    after_add = Progress(done=1, last_time=10.0, expected_world=3)
    # 50 % done but still training at 2 after the add: not yet
    assert due(STEPS, AT, after_add, [progress(3, 0, 2, t=11.0)], [], 4, 100) is None
    # at 3 now, but only 30 % done
    assert due(STEPS, AT, after_add, [progress(2, 20, 3, t=11.0)], [], 4, 100) is None
    assert due(STEPS, AT, after_add, [progress(2, 70, 3, t=11.0)], [], 4, 100) == "kill"
    done = Progress(done=3, last_time=10.0, expected_world=3)
    assert due(STEPS, AT, done, [progress(4, 90, 3, t=11.0)], [], 4, 100) is None


def test_a_world_held_before_its_last_step_settles_on_the_drivers_reset():
    """Before: the schedule waited for a step at the new size, which a training held before
    its last step (the slow motion's hold file) never takes: the bench hung until its timeout."""
    after_add = Progress(done=1, last_time=10.0, expected_world=3)
    held = [progress(2, 96, 2, t=9.0)]  # the last progress record, before the add
    assert not settled(after_add, held, [])
    assert not settled(after_add, held, [Record(11.0, "reset", {"world_size": 2})])
    assert not settled(after_add, held, [Record(9.5, "reset", {"world_size": 3})])  # before the step
    assert settled(after_add, held, [Record(11.0, "reset", {"world_size": 3})])
    assert due(STEPS, AT, after_add, held, [Record(11.0, "reset", {"world_size": 3})], 2, 100) == "kill"


def test_due_wants_a_point_per_step():
    with pytest.raises(ValueError):
        due(STEPS, (0.1,), Progress(), [], [], 4, 100)


def rows() -> list[Row]:
    return [Row(1, 0.95, 0.96, (2, 3, 2, 3), 3), Row(2, 0.97, 0.95, (2, 3, 2, 3), 3),
            Row(3, 0.96, 0.96, (2, 3, 2, 3), 4)]


def test_summary_means_spreads_and_the_verdict():
    s = summarize(rows())
    assert s.fixed.mean == pytest.approx(0.96) and s.elastic.mean == pytest.approx(0.95666, abs=1e-4)
    assert s.fixed.std == pytest.approx(0.01) and s.fixed.low == 0.95 and s.fixed.high == 0.97
    assert s.difference == pytest.approx(s.elastic.mean - s.fixed.mean)
    assert s.paired_mean == pytest.approx(s.difference)
    assert s.within_spread  # |-0.0033| <= 0.01
    far = summarize([Row(r.seed, r.fixed, r.fixed - 0.05, r.elastic_world_sizes, 3) for r in rows()])
    assert not far.within_spread and far.difference == pytest.approx(-0.05)


def test_summary_refuses_no_rows_and_accuracies_that_are_not_in_0_1():
    with pytest.raises(ValueError, match="no seeds"):
        summarize([])
    with pytest.raises(ValueError, match="not a number in"):
        summarize([Row(1, 0.9, math.nan, (2,), 0)])
    with pytest.raises(ValueError, match="not a number in"):
        summarize([Row(1, 1.5, 0.9, (2,), 0)])


def test_one_seed_has_no_spread():
    s = summarize(rows()[:1])
    assert s.fixed.std == 0.0 and s.paired_std == 0.0


def test_the_table_has_a_row_per_seed_then_mean_std_min_max_and_the_verdict():
    text = table(rows(), summarize(rows()), 3)
    lines = text.splitlines()
    assert lines[0].split(" | ")[:3] == ["  seed", "fixed (np 3)".rjust(14), " elastic"]
    assert [line.split("|")[0].strip() for line in lines[2:5]] == ["1", "2", "3"]
    assert "2 -> 3 -> 2 -> 3 (3 resets)" in lines[2]
    assert [line.split("|")[0].strip() for line in lines[6:10]] == ["mean", "std", "min", "max"]
    assert lines[-1].startswith("final validation accuracy, %: elastic - fixed = -0.33 points, within")
