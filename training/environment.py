"""The environment variables the training reads: one registry.

After each name, who reads it. Horovod sets ``HOROVOD_*`` in every worker. Variables shared
with other packages are in ``shared.environment``.
"""
from __future__ import annotations

HOROVOD_CYCLE_TIME = "HOROVOD_CYCLE_TIME"  # Horovod itself: set by tests/conftest.py and scripts/demo
HOROVOD_LOCAL_SIZE = "HOROVOD_LOCAL_SIZE"  # training.loop
HOROVOD_RANK = "HOROVOD_RANK"  # training.loop
OMP_NUM_THREADS = "OMP_NUM_THREADS"  # training.loop
TRAINING_DEBUG_GPU_PATH = "TRAINING_DEBUG_GPU_PATH"  # training.options
TRAINING_DEBUG_SAMPLE_LOG = "TRAINING_DEBUG_SAMPLE_LOG"  # training.options
TRAINING_TRACEBACK = "TRAINING_TRACEBACK"  # training.cli
TRAINING_TRACE_DIR = "TRAINING_TRACE_DIR"  # training.options
