"""StepSampler inside a TorchState (one process): commit, restore and re-plan keep the
accounting exact, and Horovod's state handler recognises it as an ElasticSampler."""

import horovod.torch as hvd
import pytest

from training.accounting import epoch_order
from training.sampler import StepSampler


@pytest.fixture(scope="module", autouse=True)
def horovod():
    hvd.init()
    yield
    hvd.shutdown()


def test_batches_follow_the_plan_and_state_round_trips():
    s = StepSampler(10, 4, seed=3)
    s.reset()
    order = epoch_order(10, 3, 0)
    assert list(s) == [order[0:4], order[4:8], order[8:10]]
    assert len(s) == 3
    s.record_step(s.steps[0])
    assert s.state_dict() == {"epoch": 0, "processed_num": 4}
    t = StepSampler(10, 4, seed=3)
    t.load_state_dict(s.state_dict())
    assert list(t) == [order[4:8], order[8:10]]
    t.set_epoch(1)
    assert list(t)[0] == epoch_order(10, 3, 1)[0:4]
    with pytest.raises(TypeError, match="record_step"):
        t.record_batch(0, 4)


def test_torch_state_restores_the_last_commit():
    import torch

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    s = StepSampler(12, 3, shuffle=False)
    s.reset()
    state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=s, epoch=0)
    s.record_step(s.steps[0])
    state.commit()
    s.record_step(s.steps[1])  # not committed: a failure rolls it back
    state.restore()
    assert s.processed_num == 3
    assert [b for b in s] == [[3, 4, 5], [6, 7, 8], [9, 10, 11]]
