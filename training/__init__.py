"""Elastic training jobs (MNIST, ResNet-50) on ``horovod.torch.elastic``, and the generator of
their small MNIST-format demo dataset.

Knows Horovod and PyTorch; never imports ``discovery``, ``elastic`` or ``localcluster``, and
nothing of Kubernetes.
"""
