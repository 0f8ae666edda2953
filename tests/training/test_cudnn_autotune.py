"""A short batch does not make cuDNN autotune every convolution again for its shape."""

import torch

from training.loop import cudnn_autotune


def test_short_batches_run_without_autotuning_and_the_setting_comes_back():
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        with cudnn_autotune(False):
            assert torch.backends.cudnn.benchmark is False
        assert torch.backends.cudnn.benchmark is True
        with cudnn_autotune(True):
            assert torch.backends.cudnn.benchmark is True
        torch.backends.cudnn.benchmark = False  # the CPU path never turns it on
        with cudnn_autotune(True):
            assert torch.backends.cudnn.benchmark is False
    finally:
        torch.backends.cudnn.benchmark = before
