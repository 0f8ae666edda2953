"""Patch 0104 (NCCL communicators non-blocking and abortable; teardown that joins the
finalizer threads before it frees the communicators) on a machine without a GPU: the logic
they share, ``horovod/common/ops/nccl_lifecycle.h``, includes no NCCL or CUDA header, so it is
compiled here with g++ from the patches themselves and run against a fake communicator state
(``tests/runtime/cpp/nccl_lifecycle_test.cc``). The NCCL calls around it are only compiled
(``horovod-fork/tools/check-horovod-nccl``), never run here.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.needs import missing

ROOT = Path(__file__).parents[2]
PATCHES = ROOT / "horovod-fork" / "patches"
HEADER = "horovod/common/ops/nccl_lifecycle.h"

@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """The test program, built against the header as the patch series leaves it."""
    if shutil.which("g++") is None or shutil.which("git") is None:
        missing("needs g++ and git")
    tree = tmp_path_factory.mktemp("nccl-lifecycle")
    touching = [p for p in sorted(PATCHES.glob("*.patch")) if HEADER in p.read_text()]
    assert touching, f"no patch in {PATCHES} makes {HEADER}"
    for patch in touching:  # only that file: the rest of each patch needs Horovod's tree
        subprocess.run(["git", "apply", "-p1", f"--include={HEADER}", str(patch)], cwd=tree, check=True)
    exe = tree / "nccl_lifecycle_test"
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-pthread", "-I", str(tree / Path(HEADER).parent),
                    str(ROOT / "tests" / "runtime" / "cpp" / "nccl_lifecycle_test.cc"), "-o", str(exe)],
                   check=True, timeout=300)
    return exe


def test_polling_and_teardown_order(program):
    """0104: the polling of a non-blocking call and the teardown order, in the test
    program (tests/runtime/cpp/nccl_lifecycle_test.cc) that includes the patched header."""
    out = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_stock_teardown_order_is_caught(program):
    """0104: the same check on stock Horovod's order (free, then join) fails: the finalizer polls a
    freed communicator."""
    out = subprocess.run([str(program), "stock-order"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout
    assert "FAILED: no finalizer polls a communicator after it was freed" in out.stdout, out.stdout
    assert out.stdout.count("FAILED") == 1, out.stdout
