"""Every elastic command keeps the error contract: bad input is one line ``error: <cause>`` and
exit 2; ``Interrupted`` by signal N exits 128+N (docs/architecture.md, "Errors and exit codes")."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.errors import ConfigError, ElasticError, Interrupted, SyncError
from shared.runner import run_main

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("argv, message", [
    (["ssh-bootstrap", "hosts", "--identity", "/nonexistent/key", "--out", "{tmp}/ssh", "--hosts", "10.0.0.1"],
     "identity file /nonexistent/key does not exist"),
    (["ssh-bootstrap", "bogus"],
     "argument command: invalid choice: 'bogus' (choose from 'keys', 'hosts', 'horovodrun-args') "
     "(see ssh-bootstrap --help)"),
    (["dataset-sync", "/nonexistent/src", "/data/x", "--hosts", "10.0.0.1"],
     "missing dataset directory: /nonexistent/src"),
    (["elastic-run", "--min-np", "0", "--", "true"], "--min-np must be a positive integer, got 0"),
    (["elastic-run", "--first-world-timeout", "0", "--", "true"],
     "--first-world-timeout must be a positive number of seconds, got 0"),
    ([sys.executable, "-m", "elastic.prepare.hook", "--identity", "/nonexistent/key", "--ssh-dir", "{tmp}/ssh",
      "bad;host"], "host name 'bad;host' is not a host name: characters other than letters, digits, '-' and '.'"),
    ([sys.executable, "-m", "elastic.prepare.hook"],
     "the following arguments are required: --identity, --ssh-dir, host (see python -m elastic.prepare.hook --help)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, message):
    argv = [a.format(tmp=tmp_path) for a in argv]
    exe = argv[0] if argv[0] == sys.executable else str(BIN / argv[0])
    proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [f"error: {message}"])


@pytest.mark.parametrize("error, code, line", [
    (Interrupted("stopped by signal 15", signal.SIGTERM), 143, "error: stopped by signal 15"),
    (Interrupted("cancelled"), 130, "error: cancelled"),
    (SyncError("host a failed"), 1, "error: host a failed"),
    (ConfigError("--np must be positive"), 2, "error: --np must be positive"),
])
def test_run_main_maps_errors_to_the_contracts_codes(capsys, error, code, line):
    def body() -> int:
        raise error
    assert run_main("x", body, usage=ConfigError, failure=ElasticError) == code
    assert capsys.readouterr().err.splitlines() == [line]
