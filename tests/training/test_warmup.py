"""The warm-up before ``hvd.init()`` (``training.warmup``, ``training.loaders``): its plan, the
loader that yields it within a block and then the training plan from the same processes, and a model
left as it was by the autotune pass (rank 0 hands that state to every other rank)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset

from training.loaders import Planned, make_loader, warm_batches
from training.models import MnistNet, resnet50
from training.warmup import autotune_pass, model_kept


class Indices(Dataset):
    """Each sample is its own index, and the process that loaded it."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i):
        import os

        return torch.tensor([i, os.getpid()])


def test_warm_batches_one_full_batch_per_process_wrapping_a_small_dataset():
    assert warm_batches(10, 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert warm_batches(3, 4, 2) == [[0, 1, 2, 0], [1, 2, 0, 1]]
    for bad in ((0, 4, 1), (10, 0, 1), (10, 4, 0)):
        with pytest.raises(ValueError):
            warm_batches(*bad)


def test_planned_yields_the_warm_up_within_its_block_then_the_plan_read_at_each_iteration():
    plan = [[0, 1]]
    planned = Planned(plan)
    with planned.instead([[7, 8], [9]]):
        assert list(planned) == [[7, 8], [9]] and len(planned) == 2
        assert list(planned) == [[7, 8], [9]]
    assert list(planned) == [[0, 1]]
    plan.append([2])  # re-read: the sampler re-plans between iterations
    assert list(planned) == [[0, 1], [2]] and len(planned) == 2


@pytest.mark.timeout(300)
def test_a_persistent_loader_serves_the_training_plan_from_the_processes_the_warm_up_started():
    plan = [[5, 6], [7]]
    planned = Planned(plan)
    loader = make_loader(Indices(), planned, workers=2, pin_memory=False,
                         generator=torch.Generator().manual_seed(1))
    with planned.instead(warm_batches(10, 2, 2)):
        warm = [b.tolist() for b in loader]
    assert [[s[0] for s in b] for b in warm] == [[0, 1], [2, 3]]
    pids = {s[1] for b in warm for s in b}
    assert len(pids) == 2  # every process loaded a batch
    trained = [b.tolist() for b in loader]
    assert [[s[0] for s in b] for b in trained] == [[5, 6], [7]]
    assert {s[1] for b in trained for s in b} <= pids  # no new processes
    del loader


def snapshot(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
def test_the_autotune_pass_leaves_weights_statistics_and_gradients_as_they_were(amp):
    torch.manual_seed(0)
    model = resnet50(3).to(memory_format=torch.channels_last)
    model.eval()
    before = snapshot(model)
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    autotune_pass(model, x, torch.tensor([0, 2]), amp=amp, amp_dtype=torch.bfloat16)
    after = snapshot(model)
    assert before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == []  # BatchNorm's running statistics and counters included
    assert all(p.grad is None for p in model.parameters())
    assert model.training is False


def test_model_kept_restores_the_buffers_after_an_error_in_the_block():
    model = torch.nn.BatchNorm1d(3)
    before = snapshot(model)
    with pytest.raises(RuntimeError), model_kept(model):
        model.train()
        model(torch.randn(4, 3)).sum().backward()
        raise RuntimeError("boom")
    assert all(torch.equal(before[k], v) for k, v in snapshot(model).items())
    assert model.weight.grad is None


def test_a_model_without_buffers_is_fine():
    model = MnistNet()
    before = snapshot(model)
    autotune_pass(model, torch.randn(2, 1, 28, 28), torch.tensor([1, 2]), amp=False,
                  amp_dtype=torch.float16)
    assert all(torch.equal(before[k], v) for k, v in snapshot(model).items())
