"""The learning-rate ramp across a 2 -> 4 reset, played on a real Trainer and its real
elastic state in a Horovod world of one whose *reported* size is set by the script (the only
stand-in: one process cannot be four ranks). Prints, as JSON, the rates at fractions of an
epoch before and after the scale-up, after a roll-back in the middle of the ramp (restore,
reset callbacks, sync, enter: what ``hvd.elastic.run`` does on ``HorovodInternalError``), of a
new job resuming from a checkpoint written mid-ramp (``argv[1]``: its directory), and after
a shrink back to 2."""

import dataclasses
import json
import sys
import types

from training import mnist, options
from training.loop import Trainer
from training.signals import StopFlags

N = 1000
args = options.parse(["--synthetic", "--synthetic-size", str(N), "--batch-size", "10",
                      "--lr", "0.1", "--warmup-epochs", "0", "--lr-milestones", "",
                      "--scale-up-ramp", "0.5", "--workers", "0"], mnist.DEFAULTS)
task = mnist.make_task(args)
import horovod.torch as real_hvd  # noqa: E402

real_hvd.init()


class Hvd(types.ModuleType):
    """horovod.torch, but ``size()`` reports ``reported`` (the world being simulated)."""

    reported = 2

    def __getattr__(self, name):
        return getattr(real_hvd, name)

    def size(self):
        return self.reported


hvd = Hvd("hvd")


def rate_at(trainer, state, processed: int) -> float:
    trainer.sampler.processed_num = processed
    trainer.set_lr(state)
    return trainer.opt.param_groups[0]["lr"]


def enter_after_reset(trainer, state, size: int) -> None:
    hvd.reported = size
    state.on_reset()
    state.sync()
    trainer.enter(state)


trainer = Trainer(task, args, StopFlags())
state = trainer.attach(hvd)
state.sync()
trainer.enter(state)
out = {"before": rate_at(trainer, state, 200)}
state.save()  # a commit at 200 samples
enter_after_reset(trainer, state, 4)
out["ramp"] = list(state.lr_ramp)
out["after"] = [rate_at(trainer, state, p) for p in (200, 325, 450, 700, 900)]
state.save()  # committed mid-ramp (at 900: past it; the ramp stays recorded)
trainer.sampler.processed_num = 450
state.save()
# a failure: roll back to the commit at 450, re-enter at the same size
state.restore()
enter_after_reset(trainer, state, 4)
out["rolled_back"] = [list(state.lr_ramp), rate_at(trainer, state, 450)]
# a new job resuming from a checkpoint written mid-ramp, at the same size
args = dataclasses.replace(args, checkpoint_dir=sys.argv[1])
trainer.args = args
trainer.write_checkpoint(state, background=False)  # on disk before the new job looks
resumed = Trainer(task, args, StopFlags())
resumed_state = resumed.attach(hvd)
resumed_state.sync()
resumed.enter(resumed_state)
out["resumed"] = [list(resumed_state.lr_ramp), rate_at(resumed, resumed_state, 450)]
enter_after_reset(trainer, state, 2)
out["shrunk"] = [state.lr_ramp, rate_at(trainer, state, 450)]
print(json.dumps(out))
sys.stdout.flush()
