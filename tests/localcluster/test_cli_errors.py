"""local-cluster keeps the error contract: bad input is one line ``error: <cause>`` and exit 2,
a runtime failure exit 1 (docs/architecture.md, "Errors and exit codes")."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOCAL_CLUSTER = str(Path(sys.executable).parent / "local-cluster")


@pytest.mark.parametrize("argv, env, code, message", [
    (["up"], {"LOCAL_CLUSTER_WORKERS": "many"}, 2, "LOCAL_CLUSTER_WORKERS must be an integer, got 'many'"),
    (["scale", "lots"], {}, 2, "argument count: invalid int value: 'lots' (see local-cluster scale --help)"),
    (["fault", "latency", "--seconds", "-1"], {}, 2, "--seconds must be >= 0, got -1.0"),
    (["status"], {}, 1, "no cluster is running with state dir {state} (start one: local-cluster up)"),
])
def test_bad_input_exits_2_and_failures_1_with_one_line(tmp_path, argv, env, code, message):
    state = tmp_path / "state"
    proc = subprocess.run([LOCAL_CLUSTER, *argv, "--state-dir", str(state)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stderr.splitlines()) == (code, [f"error: {message.format(state=state)}"])
