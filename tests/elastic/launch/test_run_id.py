"""``elastic-run --run-id``: a run identity given from outside (deploy/ gives the launcher pod's
uid), so the discovery sidecar's prepare hook knows which run to keep while it stops the job's
other runs. The workers carry it, the hook keeps it; a bad value is a one-line usage error."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.common.reap import RUN_ID_ENV

TRAIN = ("python", "-m", "training.mnist")
ELASTIC_RUN = str(Path(sys.executable).parent / "elastic-run")


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("DISCOVERY_", "ELASTIC_"))}
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    return e


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ELASTIC_RUN, "--dry-run", "--selector", "app=x", *args, "--", *TRAIN],
                          capture_output=True, text=True, env=env(), timeout=120)


def test_the_run_id_given_is_the_workers_and_the_hook_keeps_it(tmp_path):
    (tmp_path / "id").write_text("key")
    proc = dry_run("--job-id", "job-1", "--run-id", "0a9b8c7d-6e5f", "--ssh-identity-file", str(tmp_path / "id"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["run_id"] == "0a9b8c7d-6e5f"
    assert doc["env"][RUN_ID_ENV] == "0a9b8c7d-6e5f"
    prepare = doc["daemon"]["spec"]["prepare_cmd"]
    assert "--reap-job job-1 --keep-run 0a9b8c7d-6e5f" in " ".join(prepare if isinstance(prepare, list) else [prepare])


def test_without_it_every_run_has_its_own():
    ids = {json.loads(dry_run().stdout)["run_id"] for _ in range(2)}
    assert len(ids) == 2


@pytest.mark.parametrize(("args", "line"), [
    (["--run-id", "a b"], "error: --run-id must be 1 to 63 letters, digits or '-', got 'a b'"),
    (["--run-id", "j-1", "--job-id", "j-1"], "error: --run-id must differ from the job's id, got 'j-1' for both"),
])
def test_a_bad_run_id_is_a_one_line_usage_error(args, line):
    proc = dry_run(*args)
    assert (proc.returncode, proc.stderr.strip()) == (2, line)
