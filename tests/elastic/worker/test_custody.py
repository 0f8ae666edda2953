"""The adoption window's rule (elastic.worker.custody): an orphan trains on for the window,
an adoption keeps it, the adopting leader's silence makes it an orphan again, and nothing
unadopted outlives the window."""
from elastic.worker.custody import ADOPTED, ATTACHED, ORPHAN, Custody

WHY = "nobody reads this worker's output (its ssh session or launcher is gone)"


def test_without_a_window_a_loss_ends_the_worker_at_once():
    c = Custody(0)
    assert c.step(10.0, None, None).end is None
    step = c.step(11.0, WHY, None)
    assert step.end == WHY and c.state == ATTACHED


def test_an_orphan_trains_on_until_its_window_ends_then_is_ended():
    c = Custody(30)
    step = c.step(100.0, WHY, None)
    assert step.end is None and c.state == ORPHAN
    assert step.say == f"{WHY}: the training goes on for up to 30 s for a new leader to adopt it"
    assert c.step(130.0, WHY, None).end is None  # the window's last moment
    end = c.step(130.3, WHY, None).end
    assert end == f"{WHY}, and no leader adopted it within 30 s"


def test_an_answer_from_before_it_was_orphaned_does_not_adopt_it():
    c = Custody(30)
    c.step(100.0, WHY, None)
    assert c.step(101.0, None, 99.5).say is None and c.state == ORPHAN


def test_an_adopted_worker_lives_past_the_window_and_is_orphaned_again_when_its_leader_falls_silent():
    c = Custody(30)
    c.step(100.0, WHY, None)
    step = c.step(110.0, None, 109.8)
    assert c.state == ADOPTED and step.say and "adopted" in step.say
    assert c.step(500.0, None, 499.0) == step.__class__()  # held by the new leader's lease
    silent = "no answer from the driver for 8.1 s (lease 8 s)"
    step = c.step(510.0, silent, 501.9)
    assert c.state == ORPHAN and step.end is None and step.say.startswith(silent)
    assert c.step(520.0, silent, 501.9).end is None  # the old adoption does not count again
    assert c.step(540.5, silent, 501.9).end == f"{silent}, and no leader adopted it within 30 s"
