"""The ``horovodrun`` a user runs (elastic.driver.entry writes it; elastic.driver.hvdrun:main is
what it runs): the venv's runs the project's driver where the venv carries the whole series and
Horovod's own otherwise (tests/drivers.py), keeps the discovery script it is given, and
``horovodrun-horovod`` is always Horovod's own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.driver import entry
from elastic.errors import ConfigError
from shared.environment import DISCOVERY_URL
from shared.lease_wire import OTHER_RUN, RUN_ID_ENV
from tests import drivers
from tests.runtime.test_horovod_patches import BIN, discovery_script, run_env

ROOT = Path(__file__).resolve().parents[3]
JOB_DEADLINE = 240.0  # one worker that asks one question; generous: the machine is shared

# A worker that asks the driver's rendezvous server about the lease of another run and writes
# the status it got: the project's driver answers OTHER_RUN (410), Horovod's own 404.
ASK = """
import http.client, os, sys
conn = http.client.HTTPConnection(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                                  int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]), timeout=30)
conn.request("GET", "/elastic-run-lease/another-run")
with open(sys.argv[1], "w") as f:
    f.write(str(conn.getresponse().status))
"""


def test_install_writes_the_chosen_launcher_once(tmp_path):
    assert entry.install(str(tmp_path), "project", "/venv/bin/python")
    path = tmp_path / "horovodrun"
    text = path.read_text()
    assert text.startswith("#!/venv/bin/python\n") and "from elastic.driver.hvdrun import main\n" in text
    assert os.access(path, os.X_OK)
    inode = path.stat().st_ino
    assert not entry.install(str(tmp_path), "project", "/venv/bin/python")  # the same: untouched
    assert path.stat().st_ino == inode
    assert entry.install(str(tmp_path), "horovod", "/venv/bin/python")
    assert "from horovod.runner.launch import run_commandline\n" in path.read_text()
    assert path.stat().st_ino != inode  # replaced by a rename, never rewritten in place


def test_install_replaces_horovods_script(tmp_path):
    """What pip leaves after (re)installing Horovod: its own console script."""
    path = tmp_path / "horovodrun"
    path.write_text("#!/venv/bin/python\nfrom horovod.runner.launch import run_commandline\n")
    path.chmod(0o755)
    assert entry.install(str(tmp_path), "project", "/venv/bin/python")
    assert path.read_text() == entry.script("project", "/venv/bin/python")


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    with pytest.raises(ConfigError):
        entry.install(str(tmp_path / "missing"))
    with pytest.raises(ConfigError):
        entry.install(str(tmp_path), python="python3")
    proc = subprocess.run([sys.executable, "-m", "elastic.driver.entry", str(tmp_path / "missing")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: {tmp_path / 'missing'}: not a directory"]
    assert not list(tmp_path.iterdir())


def lease_answer(tmp_path: Path, command: str) -> int:
    """Run a 1-worker elastic job with the venv's ``command`` and a discovery script, with
    ``DISCOVERY_URL`` naming no daemon (as a user's environment has it for ``discover-hosts``):
    the status the driver's rendezvous server gave the worker's lease question."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n")
    worker, answer = tmp_path / "ask.py", tmp_path / "answer"
    worker.write_text(ASK)
    env = run_env(**{RUN_ID_ENV: "this-run", DISCOVERY_URL: "http://127.0.0.1:9"})
    proc = subprocess.run([str(BIN / command), "-np", "1", "--min-np", "1", "--max-np", "1",
                           "--host-discovery-script", str(script), "--network-interface", "lo",
                           "--elastic-timeout", "60", sys.executable, str(worker), str(answer)],
                          env=env, capture_output=True, text=True, timeout=JOB_DEADLINE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return int(answer.read_text())


@pytest.mark.horovod
@pytest.mark.timeout(2 * JOB_DEADLINE)
def test_the_venvs_horovodrun_runs_the_project_driver_and_keeps_its_discovery_script(tmp_path):
    """The user's command, ``horovodrun --host-discovery-script ...``: on the whole series the
    project's driver answers the lease (another run's wrapper: 410; Horovod's driver: 404), and
    the job runs on the script's hosts although ``DISCOVERY_URL`` names no daemon (push
    discovery is elastic-run's, never the environment's)."""
    expected = OTHER_RUN if drivers.whole_series() else 404
    assert lease_answer(tmp_path, "horovodrun") == expected


@pytest.mark.horovod
@pytest.mark.timeout(2 * JOB_DEADLINE)
def test_horovodrun_horovod_is_horovods_own(tmp_path):
    assert lease_answer(tmp_path, "horovodrun-horovod") == 404
