"""shared.envvars: a flag's environment variable, the same rule in every package."""
import subprocess
import sys
from pathlib import Path

import pytest

from shared import envvars
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


@pytest.mark.parametrize("parse, value, expected", [
    (envvars.parse_int, "7", 7), (envvars.parse_int, None, None),
    (envvars.parse_positive, "0.5", 0.5), (envvars.parse_seconds, "0", 0.0),
    (envvars.parse_seconds, "2.5", 2.5),
])
def test_a_flag_value_as_a_number(parse, value, expected):
    assert parse("--flag", value, ValueError) == expected


@pytest.mark.parametrize("parse, value, message", [
    (envvars.parse_int, "1.5", "--flag must be an integer, got '1.5'"),
    (envvars.parse_positive, "0", "--flag must be > 0, got '0'"),
    (envvars.parse_positive, "inf", "--flag must be > 0, got 'inf'"),
    (envvars.parse_positive, "soon", "--flag must be a number, got 'soon'"),
    (envvars.parse_seconds, "-1", "--flag must be >= 0, got '-1'"),
    (envvars.parse_seconds, "nan", "--flag must be >= 0, got 'nan'"),
])
def test_a_bad_flag_value_raises_the_callers_error_naming_it(parse, value, message):
    with pytest.raises(UsageError) as info:
        parse("--flag", value, UsageError)
    assert str(info.value) == message
