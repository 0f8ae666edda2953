"""``python -m tests.training.rank_dir_job BASE ARGS...`` (under horovodrun): train MNIST with
``--checkpoint-dir BASE/rank<HOROVOD_RANK>``, i.e. a checkpoint directory of each rank's own,
as on hosts whose local disks do not share rank 0's checkpoints."""

import os
import sys

from training import mnist

base, *argv = sys.argv[1:]
sys.exit(mnist.main([*argv, "--checkpoint-dir", os.path.join(base, f"rank{os.environ['HOROVOD_RANK']}")]))
