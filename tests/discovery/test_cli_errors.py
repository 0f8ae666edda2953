"""discovery-daemon and discover-hosts keep the error contract: bad input is one line
``error: <cause>`` and exit 2 (docs/architecture.md, "Errors and exit codes")."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("argv, message", [
    (["discovery-daemon", "--selector", "app=x", "--port", "abc"], "--port must be an integer, got 'abc'"),
    (["discovery-daemon", "--bogus"], "unrecognized arguments: --bogus (see discovery-daemon --help)"),
    (["discovery-daemon", "--selector", "app=x", "--prepare-cmd", "true", "--prepare-recheck", "-1"],
     "--prepare-recheck must be >= 0, got '-1'"),
    (["discovery-daemon", "--selector", "app=x", "--prepare-cmd", "true", "--prepare-leader-lease", "ns/job"],
     "--prepare-leader-lease and --prepare-leader-identity go together"),
    (["discovery-daemon", "--selector", "app=x", "--prepare-leader-lease", "ns/job", "--prepare-leader-identity", "b"],
     "--prepare-leader-lease needs --prepare-cmd"),
    (["discovery-daemon", "--selector", "app=x", "--prepare-cmd", "true", "--prepare-leader-lease", "job",
      "--prepare-leader-identity", "b"], "--prepare-leader-lease must be NAMESPACE/NAME, got 'job'"),
    (["discovery-daemon", "--selector", "app=x", "--prepare-cmd", "true", "--prepare-leader-lease", "ns/job",
      "--prepare-leader-identity", "b c"],
     "--prepare-leader-identity must be letters, digits, '.', '_' or '-', got 'b c'"),
    (["discover-hosts", "--fallback", "bogus"], "--fallback must be one of none, cache, api, got 'bogus'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISCOVERY_")}
    proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=60,
                          env=env, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [f"error: {message}"])
