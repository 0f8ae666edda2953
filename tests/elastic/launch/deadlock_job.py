"""An elastic horovod.torch job that deadlocks like Horovod's pytorch_mnist_elastic.py after a
world change: its ranks disagree on how many steps an epoch has, so rank 0 waits in an
allreduce the others never join. It commits a few times first (progress), then hangs
forever without any error: only a watchdog can end it. Rank 0 appends "hung" to $HUNG_FILE
just before it blocks."""
import os

import horovod.torch as hvd
import torch

hvd.init()
model = torch.nn.Linear(2, 1)
state = hvd.elastic.TorchState(model=model, step=0)


@hvd.elastic.run
def train(state):
    while state.step < 3:
        hvd.allreduce(torch.ones(1), name=f"step.{state.step}")
        state.step += 1
        state.commit()
    if hvd.rank() == 0:  # one extra step that no other rank takes
        with open(os.environ["HUNG_FILE"], "a") as f:
            f.write("hung\n")
        hvd.allreduce(torch.ones(1), name="extra")
    else:
        while True:  # the others wait for "the next epoch" in a collective rank 0 never joins
            hvd.allreduce(torch.ones(1), name="next-epoch")


train(state)
