"""shared.envvars: a flag's environment variable, the same rule in every package."""
import subprocess
import sys
from pathlib import Path

import pytest

from shared.envvars import env_default, env_int


class UsageError(Exception):
    pass


def test_unset_or_empty_is_the_fallback(monkeypatch):
    monkeypatch.delenv("EH_TEST_VAR", raising=False)
    assert env_default("EH_TEST_VAR", "x") == "x" and env_int("EH_TEST_VAR", 3) == 3
    monkeypatch.setenv("EH_TEST_VAR", "")
    assert env_default("EH_TEST_VAR", "x") == "x" and env_int("EH_TEST_VAR", None) is None


def test_an_integer_is_read(monkeypatch):
    monkeypatch.setenv("EH_TEST_VAR", "17")
    assert env_int("EH_TEST_VAR", 3) == 17 and env_default("EH_TEST_VAR") == "17"


def test_a_non_integer_raises_the_callers_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("EH_TEST_VAR", "many")
    with pytest.raises(UsageError, match="^EH_TEST_VAR must be an integer, got 'many'$"):
        env_int("EH_TEST_VAR", 3, UsageError)


def test_elastic_raises_its_usage_error(monkeypatch):
    from elastic.common.cli import env_int as elastic_env_int
    from elastic.errors import ConfigError

    monkeypatch.setenv("ELASTIC_SSH_JOBS", "many")
    with pytest.raises(ConfigError, match="^ELASTIC_SSH_JOBS must be an integer, got 'many'$"):
        elastic_env_int("ELASTIC_SSH_JOBS", 16)


def test_local_cluster_exits_2_with_one_line(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LOCAL_CLUSTER_WORKERS": "many", "LOCAL_CLUSTER_STATE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "localcluster.cli", "up"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=str(Path(__file__).parents[2]))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "LOCAL_CLUSTER_WORKERS must be an integer, got 'many'" in r.stderr
