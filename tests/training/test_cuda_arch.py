"""The device's compute capability against the wheel's architecture list: ``training.cuda_arch``
and ``images/check-cuda`` with a made-up device (this machine has no GPU) and the real torch
wheel's list (torch 2.14.1 cu130: sm_75 ... sm_120)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from training.cuda_arch import arch_mismatch, check_devices, runs_on

ROOT = Path(__file__).parents[2]
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize("device, capability, ok", [
    ("Tesla P100-PCIE-16GB", (6, 0), False),
    ("Tesla V100-SXM2-16GB", (7, 0), False),
    ("Tesla T4", (7, 5), True),
    ("NVIDIA A100-SXM4-80GB", (8, 0), True),
    ("NVIDIA A10G", (8, 6), True),
    ("NVIDIA L4", (8, 9), True),          # runs sm_86's code
    ("NVIDIA H100 80GB HBM3", (9, 0), True),
    ("NVIDIA B200", (10, 0), True),
    ("NVIDIA B300", (10, 3), True),       # runs sm_100's code
    ("NVIDIA Thor", (11, 0), False),      # no sm_110 in the x86_64 wheel
    ("NVIDIA GeForce RTX 5090", (12, 0), True),
    ("NVIDIA GB10", (12, 1), True),
    ("Orin", (8, 7), False),              # integrated: only sm_87's code
])
def test_cu130_wheel_against_devices(device, capability, ok):
    reason = arch_mismatch(device, capability, CU130, "2.14.1", "13.0")
    assert (reason is None) == ok
    if not ok:
        assert device in reason and f"{capability[0]}.{capability[1]}" in reason
        assert "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120" in reason and "\n" not in reason


@pytest.mark.parametrize("arch, capability, ok", [
    ("sm_80", (8, 6), True), ("sm_86", (8, 0), False), ("sm_80", (9, 0), False),
    ("compute_80", (9, 0), True), ("compute_90", (8, 9), False),
    ("sm_90a", (9, 0), True), ("sm_90a", (10, 0), False), ("compute_90a", (10, 0), False),
    ("sm_100f", (10, 3), True), ("sm_70", (7, 2), False), ("sm_72", (7, 2), True),
    ("bogus", (8, 0), False),
])
def test_arch_rules(arch, capability, ok):
    assert runs_on(arch, capability) is ok


def test_an_empty_arch_list_passes():
    assert arch_mismatch("x", (7, 0), [], "2.14.1", "13.0") is None


def fake_torch(capability, name="Tesla V100-SXM2-16GB", arch_list=None):
    """torch's version and (unless given) arch list, with one made-up CUDA device."""
    arches = list(torch.cuda.get_arch_list()) if arch_list is None else arch_list
    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                           get_arch_list=lambda: arches, get_device_name=lambda i: name,
                           get_device_capability=lambda i: capability)
    return SimpleNamespace(__version__=torch.__version__, version=torch.version, cuda=cuda)


def test_this_wheel_refuses_a_v100_and_takes_an_h100():
    if not torch.cuda.get_arch_list():
        pytest.skip("a torch build without CUDA has no arch list")
    reason = check_devices(fake_torch((7, 0)))
    assert reason and "cuda:0 Tesla V100-SXM2-16GB (compute capability 7.0" in reason
    assert check_devices(fake_torch((9, 0), "NVIDIA H100 80GB HBM3")) is None


def load_check_cuda():
    loader = importlib.machinery.SourceFileLoader("check_cuda", str(ROOT / "images" / "check-cuda"))
    spec = importlib.util.spec_from_loader("check_cuda", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_check_cuda_fails_with_one_line_naming_device_and_wheel(monkeypatch, capsys):
    """images/check-cuda with a V100 and a wheel built for sm_75 and up: one line, exit 1,
    before Horovod is looked at."""
    check_cuda = load_check_cuda()
    fake = fake_torch((7, 0), arch_list=CU130)
    for attr in ("is_available", "device_count", "get_arch_list", "get_device_name",
                 "get_device_capability"):
        monkeypatch.setattr(torch.cuda, attr, getattr(fake.cuda, attr))
    assert check_cuda.main() == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("check-cuda: error: cuda:0 Tesla V100-SXM2-16GB "
                                               "(compute capability 7.0, sm_70)"), err
    assert "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120" in err[0]
    # an H100 passes the arch check; this machine's Horovod has no NCCL: the next check fails
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0))
    assert check_cuda.main() == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "built without NCCL" in err[0], err
