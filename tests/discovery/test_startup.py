"""discover-hosts starts every second: importing it must not pull in the heavy standard
modules (typing, re, enum, tempfile, argparse, socket), whatever helper it shares."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["argparse", "enum", "re", "socket", "tempfile", "typing"]


def test_discover_hosts_imports_no_heavy_module():
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import discovery.discover_hosts; "
            f"print(sorted(set(sys.modules) & set({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr
