"""The elastic state's restore (horovod/torch/elastic/state.py), as patched by
horovod-fork 0109: every restore gives back the last commit, however many
failures come between two commits, and the committed optimizer state is kept in host memory.

Real Horovod in one process (a world of one), through ``hvd.elastic.run``'s own loop
(``run_fn`` with ``hvd.init``/``hvd.shutdown`` as its reset): the training function commits,
trains on, and fails twice (``HorovodInternalError``, as when a peer is lost) before its next
commit. Fails on the build before optimizer restores from a copy: ``OptimizerStateHandler.restore`` loaded the saved
optimizer state itself, and ``Optimizer.load_state_dict`` keeps those tensors (momentum
buffers, Adam's moments), so the steps after the first restore changed the saved state in
place and the second restore gave that back.
"""
import json
import os
import subprocess
import sys

import pytest

TWO_FAILURES_BETWEEN_COMMITS = """
import json
import torch
import horovod.torch as hvd
from horovod.common.elastic import run_fn
from horovod.common.exceptions import HorovodInternalError
from horovod.torch.elastic import TorchState

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model2 = torch.nn.Linear(3, 1)
adam = torch.optim.Adam(model2.parameters(), lr=0.01)
state = TorchState(model=model, optimizer=sgd, adam=adam, model2=model2, batch=0)
restored = []
committed = {}


def optimizer_state(opt):
    return {str(k): {n: (v.tolist() if torch.is_tensor(v) else v) for n, v in s.items()}
            for k, s in opt.state_dict()["state"].items()}


def train(steps):
    for _ in range(steps):
        for m, opt in ((model, sgd), (model2, adam)):
            opt.zero_grad()
            m(torch.ones(2, 3)).pow(2).sum().backward()
            opt.step()
        state.batch += 1


def reset():
    hvd.shutdown()
    hvd.init()


def func(state):
    if not committed:
        train(3)
        state.commit()
        committed.update(sgd=optimizer_state(sgd), adam=optimizer_state(adam), batch=state.batch)
    else:
        restored.append({"sgd": optimizer_state(sgd), "adam": optimizer_state(adam), "batch": state.batch})
    if len(restored) < 2:
        train(4)  # then a peer is lost: no commit since
        raise HorovodInternalError("a peer left the collective")
    return "done"


result = run_fn(func, reset)(state)
print(json.dumps({"result": result, "committed": committed, "restored": restored}))
"""


@pytest.mark.timeout(180)
def test_every_restore_gives_back_the_last_commit_however_many_failures_between():
    """0109: two failures without a commit between them: after each restore the optimizers' state
    (SGD's momentum buffers, Adam's step and moments) and the batch counter are what was
    committed. Before optimizer restores from a copy the second restore gave the first failure's trained-on optimizer
    state (the saved state had been loaded by reference and updated in place)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-c", TWO_FAILURES_BETWEEN_COMMITS], capture_output=True, text=True,
                          env=env, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["result"] == "done"
    committed = out["committed"]
    assert committed["sgd"] and committed["adam"], committed  # momentum buffers and moments exist
    assert len(out["restored"]) == 2
    for i, restored in enumerate(out["restored"], 1):
        assert restored["batch"] == committed["batch"], f"restore {i}: the batch counter"
        assert restored["sgd"] == committed["sgd"], f"restore {i}: SGD's momentum buffers are not the committed ones"
        assert restored["adam"] == committed["adam"], f"restore {i}: Adam's state is not the committed one"


MUTATED_IN_PLACE = """
import json
import horovod.torch as hvd
from horovod.common.elastic import run_fn
from horovod.common.exceptions import HorovodInternalError
from horovod.torch.elastic import TorchState

hvd.init()
losses = []
state = TorchState(losses=losses, seen={"epoch0": [1]}, batch=0)
given = state.losses is losses
restored = []
committed = {}


def reset():
    hvd.shutdown()
    hvd.init()


def train(steps):
    for _ in range(steps):
        state.batch += 1
        state.losses.append(state.batch / 10)
        state.seen["epoch0"].append(state.batch)
        state.seen[f"b{state.batch}"] = True


def func(state):
    if not committed:
        train(2)
        state.commit()
        committed.update(losses=list(state.losses), seen=json.loads(json.dumps(state.seen)), batch=state.batch)
    else:
        restored.append(json.loads(json.dumps({"losses": state.losses, "seen": state.seen, "batch": state.batch})))
    if len(restored) < 2:
        train(3)  # then a peer is lost: no commit since
        raise HorovodInternalError("a peer left the collective")
    return "done"


result = run_fn(func, reset)(state)
print(json.dumps({"result": result, "committed": committed, "restored": restored, "given": given}))
"""


@pytest.mark.timeout(180)
def test_a_restore_rolls_back_lists_and_dicts_changed_in_place():
    """0109: ``ObjectState`` attributes changed in place after a commit (a list appended to, a
    dict updated, a nested list) are rolled back by a restore, twice in a row, like a
    reassigned int; until the first restore the attribute is the object given. Before ``ObjectState`` copies
    save kept references: the restore gave back the lists and dicts training had changed
    since the commit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-c", MUTATED_IN_PLACE], capture_output=True, text=True,
                          env=env, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    committed = out["committed"]
    assert out["result"] == "done" and committed["losses"] == [0.1, 0.2] and out["given"], out
    assert len(out["restored"]) == 2
    for i, restored in enumerate(out["restored"], 1):
        assert restored["batch"] == committed["batch"], f"restore {i}: the batch counter"
        assert restored["losses"] == committed["losses"], f"restore {i}: the list appended to after the commit"
        assert restored["seen"] == committed["seen"], f"restore {i}: the dict changed after the commit"


ON_A_GPU = """
import json
import warnings
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from horovod.torch.elastic.state import OptimizerStateHandler

warnings.simplefilter("ignore")
with FakeTensorMode():
    weight = torch.nn.Parameter(torch.ones(3, device="cuda"))
    sgd = torch.optim.SGD([weight], lr=0.1, momentum=0.9, foreach=False)
    weight.grad = torch.ones(3, device="cuda")
    sgd.step()
    handler = OptimizerStateHandler(sgd)
    handler.save()
    saved = handler._saved_optimizer_state["state"][0]["momentum_buffer"]
    print(json.dumps({"live": str(sgd.state[weight]["momentum_buffer"].device), "saved": str(saved.device)}),
          flush=True)
    handler.restore()
    live = sgd.state[weight]["momentum_buffer"]
    print(json.dumps({"restored": str(live.device), "restored_is_saved": live is saved}))
"""


@pytest.mark.timeout(120)
def test_the_committed_optimizer_state_is_kept_in_host_memory():
    """0109: an SGD optimizer whose parameter and momentum buffer are on a CUDA device (a
    ``FakeTensorMode`` device: there is no GPU here, the tensors have devices and shapes but
    no data) commits its state to host memory, and a restore gives the live state back on the
    device, as a tensor of its own. Before the host copy the saved state stayed on the GPU: a
    second optimizer state in device memory for the whole job, a third during a restore."""
    proc = subprocess.run([sys.executable, "-c", ON_A_GPU], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=100)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-3000:]
    saved = lines[0]
    assert saved["live"] == "cuda:0", saved  # the optimizer's state is on the device
    assert saved["saved"] == "cpu", f"the committed optimizer state is kept on {saved['saved']}, not in host memory"
    assert proc.returncode == 0 and len(lines) == 2, proc.stderr[-3000:]
    assert lines[1] == {"restored": "cuda:0", "restored_is_saved": False}, lines[1]
