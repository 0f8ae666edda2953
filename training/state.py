"""``TrainingState``: Horovod's ``TorchState`` with a sync that is right for every model,
a handle on what the last commit saved, and hooks around sync and restore.

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

Hooks (set as attributes after construction; not part of the synced state):
``before_sync()`` runs first in every ``sync`` on every rank (the trainer agrees there on
which state the world starts from, ``training.world.WorldPart.agree``); ``before_restore()``
runs first in every ``restore`` (the trainer waits there for a background write of the saved
state, which the restore would let training change). ``committed(generation)`` is the last
commit's saved state as a ``training.snapshots.Committed``.

``sync`` blocks until every rank has called it (it is a series of collectives).
"""

from __future__ import annotations

from collections.abc import Callable

from horovod.torch.elastic import TorchState
from horovod.torch.functions import broadcast_parameters

from training.layout import default_layout
from training.snapshots import Committed


class TrainingState(TorchState):
    """A ``TorchState`` that takes ``model=``, ``optimizer=`` and ``sampler=`` (all required)."""

    before_sync: Callable[[], None] | None = None
    before_restore: Callable[[], None] | None = None

    def sync(self) -> None:
        if self.before_sync is not None:
            self.before_sync()
        with default_layout(self.model, self.optimizer):
            super().sync()
            # rank 0's weights again: the optimizer sync may have stepped this rank's copy
            broadcast_parameters(self.model.state_dict(), root_rank=0)

    def restore(self) -> None:
        if self.before_restore is not None:
            self.before_restore()
        super().restore()

    def committed(self, generation: int) -> Committed:
        """The state the last ``save`` took: Horovod's own copies (its handlers replace them
        at the next save, never change them in place), so taking them costs nothing."""
        handlers = self._handlers
        sampler = handlers["sampler"]._saved_sampler_state
        return Committed(generation=generation, epoch=int(sampler["epoch"]),
                         processed=int(sampler["processed_num"]),
                         model=handlers["model"]._saved_model_state,
                         optimizer=handlers["optimizer"]._saved_optimizer_state,
                         fields=dict(self._saved_state))
