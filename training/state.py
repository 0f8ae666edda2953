"""``TrainingState``: Horovod's ``TorchState`` with a sync that is right for every model.

``TorchState.sync`` (Horovod 0.28.1) broadcasts the model's parameters, then the optimizer's
state with ``broadcast_optimizer_state``. On a rank whose optimizer has no state yet (a
worker that just joined, or one that could not read rank 0's checkpoint on resume), that
function first runs an optimizer step with zero gradients to create the state. With weight
decay the step is not a no-op: it shrinks the freshly broadcast weights by ``(1 - lr * wd)``
(and moves them along the decay-filled momentum), so the joiner trains on different weights
from the others for the rest of the job. Here the model's parameters and buffers are
broadcast once more after the optimizer state, which undoes that step.

Horovod also refuses tensors that are not default-contiguous (a ``channels_last`` model's
weights and momentum buffers): the whole sync runs inside ``layout.default_layout``.

``sync`` blocks until every rank has called it (it is a series of collectives).
"""

from __future__ import annotations

from horovod.torch.elastic import TorchState
from horovod.torch.functions import broadcast_parameters

from training.layout import default_layout


class TrainingState(TorchState):
    """A ``TorchState`` that takes ``model=`` and ``optimizer=`` (both required)."""

    def sync(self) -> None:
        with default_layout(self.model, self.optimizer):
            super().sync()
            # rank 0's weights again: the optimizer sync may have stepped this rank's copy
            broadcast_parameters(self.model.state_dict(), root_rank=0)
