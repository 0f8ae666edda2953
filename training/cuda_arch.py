"""Whether torch's CUDA kernels run on a device: its compute capability against the wheel's
architecture list (``torch.cuda.get_arch_list()``).

A wheel without code for the device (torch's CUDA 13.0 wheels: sm_75 to sm_120, so no
V100 (7.0) or P100 (6.0)) imports, finds the device and then fails at the first kernel: a
worker that dies there gets its host blacklisted by the elastic driver. ``images/check-cuda``
and the trainer's start on CUDA refuse it first, with one line naming both.

The rules (NVIDIA's compatibility guarantees, as ``torch.cuda`` states them):

- ``sm_XY`` (machine code) runs on devices of major version X and minor >= Y (sm_80
  on 8.0 and 8.6, not on 9.0); ``sm_XYf`` (a family) likewise;
- ``sm_XYa`` (architecture-specific features) runs on X.Y only;
- ``compute_XY`` (PTX, compiled by the driver at load) runs on every device >= X.Y;
- code for an integrated (Jetson) GPU, 5.3, 6.2, 7.2, 8.7, runs on that capability only, and
  a discrete GPU's machine code is not taken for one (before CUDA 13.2).
"""

from __future__ import annotations

import re

INTEGRATED = {(5, 3), (6, 2), (7, 2), (8, 7)}
_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


def parse_arch(arch: str) -> tuple[str, tuple[int, int], str] | None:
    """``"sm_86"`` -> ``("sm", (8, 6), "")``; ``"sm_90a"`` -> ``("sm", (9, 0), "a")``; None
    for a name not in that form."""
    m = _ARCH.match(arch.strip())
    if not m:
        return None
    return m.group(1), (int(m.group(2)), int(m.group(3))), m.group(4)


def runs_on(arch: str, capability: tuple[int, int]) -> bool:
    """Whether code built for ``arch`` (an entry of ``torch.cuda.get_arch_list()``) runs on
    a device of compute ``capability`` (major, minor)."""
    parsed = parse_arch(arch)
    if parsed is None:
        return False
    kind, built, suffix = parsed
    if built in INTEGRATED or capability in INTEGRATED or suffix == "a":
        return built == capability
    if kind == "compute":
        return capability >= built
    return capability[0] == built[0] and capability[1] >= built[1]


def arch_mismatch(device_name: str, capability: tuple[int, int], arch_list: list[str],
                  torch_version: str, cuda_version: str | None) -> str | None:
    """None when some entry of ``arch_list`` runs on the device, else the one-line reason
    naming the device, its capability and the wheel's architectures. An empty list (a build
    that does not say) passes."""
    if not arch_list or any(runs_on(a, capability) for a in arch_list):
        return None
    cc = f"{capability[0]}.{capability[1]}"
    return (f"{device_name} (compute capability {cc}, sm_{capability[0]}{capability[1]}) is not "
            f"supported by torch {torch_version} (CUDA {cuda_version}), which has kernels for "
            f"{' '.join(arch_list)} only: its first kernel would fail; use nodes with a "
            "supported GPU or a torch build with code for this one")


def device_mismatch(torch_module, index: int) -> str | None:
    """``arch_mismatch`` for CUDA device ``index`` of ``torch_module`` (``torch``; tests pass
    one whose device is made up). Reads properties only: no kernel runs."""
    cuda = torch_module.cuda
    return arch_mismatch(f"cuda:{index} {cuda.get_device_name(index)}",
                         tuple(cuda.get_device_capability(index)), list(cuda.get_arch_list()),
                         torch_module.__version__, torch_module.version.cuda)


def check_devices(torch_module) -> str | None:
    """``device_mismatch`` for each visible CUDA device: the first reason found, or None."""
    for i in range(torch_module.cuda.device_count()):
        reason = device_mismatch(torch_module, i)
        if reason:
            return reason
    return None
