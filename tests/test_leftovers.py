"""The suite's leftover check (tests/conftest.py's ``nothing_left_behind``): a module whose tests
leave a process or a listening port behind fails, naming each, and the process is ended."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAKY = '''
import socket, subprocess

held = []

def test_leaves_a_process_and_a_port():
    held.append(subprocess.Popen(["sleep", "300"]))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    held.append(s)
    print("PID", held[0].pid, "PORT", s.getsockname()[1])
'''

CLEAN = '''
import socket, subprocess

def test_cleans_up():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
    p = subprocess.Popen(["sleep", "300"])
    p.kill()
    p.wait()
'''


def run_module(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_module.py").write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-s", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-o", "addopts=", str(tmp_path / "test_module.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_module_that_leaves_a_process_and_a_port_fails_naming_both(tmp_path):
    out = run_module(tmp_path, LEAKY)
    assert out.returncode == 1, out.stdout + out.stderr
    pid, port = out.stdout.split("PID ", 1)[1].split()[0], out.stdout.split("PORT ", 1)[1].split()[0]
    assert "left behind by this module's tests" in out.stdout, out.stdout
    assert f"process pid {pid} (sleep 300)" in out.stdout and f"port 127.0.0.1:{port}" in out.stdout, out.stdout
    assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_a_module_that_cleans_up_passes(tmp_path):
    out = run_module(tmp_path, CLEAN)
    assert out.returncode == 0, out.stdout + out.stderr
