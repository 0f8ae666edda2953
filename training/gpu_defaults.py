"""Defaults chosen by the GPU a worker trains on, when the flags do not say: pure functions of
the device's name, compute capability and memory (``DeviceInfo``), and ``probe`` to read it.

- ``fit_batch_size``: the batch per GPU. NVIDIA's ResNet-50 reference takes 256, which does
  not fit a 16 GB card (T4, V100-16GB): the activations saved for the backward pass are
  ~41.7 MiB per image at 224 px in 16-bit (measured), ~10.4 GiB at 256, plus 3-4 GiB of
  fixed cost (weights, gradients, momentum, the fp16 allreduce copies, CUDA context, cuDNN
  workspaces, NCCL buffers, Horovod's fusion buffer, the allocator's slack). The largest power
  of two up to the model's batch whose estimate fits ``USABLE`` of the device's memory.
- ``augment_on_device_default``: decode and augment on the GPU (``--augment-on-device``)
  where the GPU has a hardware JPEG decoder (NVJPG: A100/A30 (8.0), H100/H200 (9.x),
  B200/GB200 (10.x), L4/L40/L40S (8.9)), where nvJPEG decodes without the CPU; elsewhere
  (T4, A10G, V100, consumer cards) nvJPEG's hybrid backend does the Huffman decoding on one
  CPU thread of the training process, slower than the loading processes: off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30
USABLE = 0.9  # of the device's memory the estimate may fill (the rest: its error margin)
_L4_L40 = re.compile(r"\bL40?S?\b")


@dataclass(frozen=True)
class DeviceInfo:
    """A CUDA device as ``torch.cuda.get_device_properties`` describes it."""

    name: str
    capability: tuple[int, int]
    total_memory: int  # bytes


def activation_bytes(bytes_224_16bit: int, image_size: int, amp: bool) -> int:
    """Saved activations per image at ``image_size`` px, from the figure at 224 px in 16-bit:
    they scale with the pixel count, and double in fp32 (no mixed precision)."""
    return int(bytes_224_16bit * (image_size / 224) ** 2 * (1 if amp else 2))


def fit_batch_size(total_memory: int, per_image: int, fixed: int, largest: int) -> int:
    """The largest power of two up to ``largest`` with ``fixed + batch * per_image`` within
    ``USABLE`` of ``total_memory``; ``largest`` itself when it is not a power of two and
    fits; at least 1."""
    budget = USABLE * total_memory - fixed
    if largest * per_image <= budget:
        return largest
    batch = 1
    while batch * 2 <= largest and batch * 2 * per_image <= budget:
        batch *= 2
    return batch


def has_jpeg_engine(name: str, capability: tuple[int, int]) -> bool:
    """Whether the GPU has a hardware JPEG decoder (NVJPG) that nvJPEG uses: every 8.0
    (A100, A30), 9.x (H100, H200, GH200) and 10.x (B200, B300, GB200) device, and of 8.9
    the L4, L40 and L40S (not the consumer Ada cards)."""
    major, minor = capability
    if (major, minor) == (8, 0) or major in (9, 10):
        return True
    return (major, minor) == (8, 9) and bool(_L4_L40.search(name))


def augment_on_device_default(device: DeviceInfo | None) -> bool:
    """``--augment-on-device`` when not given: on for a GPU with a JPEG engine, else off (the
    CPU, or a GPU whose nvJPEG would decode Huffman on one CPU thread)."""
    return device is not None and has_jpeg_engine(device.name, device.capability)


def probe(index: int) -> DeviceInfo | None:
    """CUDA device ``index`` (clamped to the devices there are), None without CUDA. Reads
    properties only (it creates no tensor; torch initialises CUDA for it)."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        return None
    props = torch.cuda.get_device_properties(min(index, torch.cuda.device_count() - 1))
    return DeviceInfo(props.name, (props.major, props.minor), int(props.total_memory))


def nccl_missing_line(gpu_path: bool, nccl_built: bool) -> str | None:
    """The line a worker logs at start when it trains on the GPU path (CUDA, or forced on
    the CPU) with a Horovod built without NCCL: its GPU gradients would then be staged
    through host memory and reduced by Gloo, correct but slow, and nothing else says so."""
    if not gpu_path or nccl_built:
        return None
    return ("warning: Horovod was built without NCCL: GPU tensors are copied to host memory "
            "and reduced by Gloo (slow); build it with HOROVOD_GPU_OPERATIONS=NCCL "
            "(images/Dockerfile does)")
