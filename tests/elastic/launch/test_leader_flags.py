"""``elastic-run --leader-election`` and its settings: off by default (elastic-run as before); on,
the Lease is the job's in the pods' namespace unless named, the timings are checked
(renew deadline shorter than the lease, retry period shorter than the deadline), and a bad
value is one line and exit 2 before anything starts."""
import subprocess

import pytest

from elastic.errors import ConfigError
from elastic.launch.cli import build_parser, config_from_args
from elastic.launch.plan import default_job_id
from tests.elastic.launch.test_run_id import ELASTIC_RUN, TRAIN, env


def config(*flags: str):
    return config_from_args(build_parser().parse_args(["--selector", "app=x", *flags]), list(TRAIN))


def test_off_unless_asked():
    assert config().election is None
    assert config("--job-id", "j").election is None


def test_the_lease_is_the_jobs_in_the_pods_namespace():
    settings = config("--leader-election", "--job-id", "Job-7", "--namespace", "train",
                      "--leader-identity", "launcher-0").election
    assert (settings.namespace, settings.name, settings.identity) == ("train", "elastic-run-job-7", "launcher-0")
    assert settings.timings.lease_duration == 15 and settings.timings.renew_deadline == 10
    derived = config("--leader-election").election
    assert derived.name == f"elastic-run-{default_job_id('default', 'app=x', None, None, TRAIN)}"
    assert derived.identity != config("--leader-election").election.identity  # one per launcher


def test_a_named_lease_and_timings():
    settings = config("--leader-election", "--leader-lease", "ops/trainer", "--leader-lease-duration", "4",
                      "--leader-renew-deadline", "3", "--leader-retry-period", "0.5").election
    assert (settings.namespace, settings.name) == ("ops", "trainer")
    assert (settings.timings.lease_duration, settings.timings.renew_deadline,
            settings.timings.retry_period) == (4, 3, 0.5)


@pytest.mark.parametrize("flags, message", [
    (["--leader-lease", "trainer"], "must be NAMESPACE/NAME"),
    (["--leader-lease", "ops/Trainer_1"], "name must be a lowercase RFC 1123 label"),
    (["--leader-lease-duration", "5", "--leader-renew-deadline", "5"], "renew deadline (5 s) must be shorter"),
    (["--leader-retry-period", "soon"], "--leader-retry-period must be a number of seconds"),
    (["--leader-identity", "a b"], "a leader identity must be"),
])
def test_bad_settings_name_the_cause(flags, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config("--leader-election", *flags)


def test_a_bad_setting_is_one_line_and_exit_2():
    proc = subprocess.run([ELASTIC_RUN, "--selector", "app=x", "--leader-election", "--leader-lease-duration", "2",
                           "--leader-renew-deadline", "3", "--", *TRAIN], capture_output=True, text=True, env=env(),
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --leader-election: the renew deadline (3 s) must be shorter than the lease duration (2 s)"]


def test_the_rendezvous_endpoint_reaches_horovodrun_only_when_asked():
    """``--rendezvous-port``/``--rendezvous-address`` (or their variables) reach horovodrun's
    environment (``elastic.driver.hvdrun`` binds and tells them); unset, Horovod's own."""
    from tests.elastic.launch.test_plan import plan_of
    plan = plan_of(config("--rendezvous-port", "29500", "--rendezvous-address", "rendezvous.train.svc"))
    assert (plan.env["ELASTIC_RENDEZVOUS_PORT"], plan.env["ELASTIC_RENDEZVOUS_ADDRESS"]) == \
        ("29500", "rendezvous.train.svc")
    plain = plan_of(config())
    assert "ELASTIC_RENDEZVOUS_PORT" not in plain.env and "ELASTIC_RENDEZVOUS_ADDRESS" not in plain.env


def test_a_bind_address_reaches_horovodrun_only_when_asked(monkeypatch):
    """``--rendezvous-bind`` (or ``ELASTIC_RENDEZVOUS_BIND``): the one address horovodrun's
    rendezvous server listens on, this launcher's own; unset, every address."""
    from tests.elastic.launch.test_plan import plan_of
    plan = plan_of(config("--rendezvous-port", "29500", "--rendezvous-bind", "127.0.0.2"))
    assert plan.env["ELASTIC_RENDEZVOUS_BIND"] == "127.0.0.2"
    assert "ELASTIC_RENDEZVOUS_BIND" not in plan_of(config("--rendezvous-port", "29500")).env
    monkeypatch.setenv("ELASTIC_RENDEZVOUS_BIND", "10.0.0.9")
    assert plan_of(config("--rendezvous-port", "29500")).env["ELASTIC_RENDEZVOUS_BIND"] == "10.0.0.9"


@pytest.mark.parametrize("flags, message", [
    (["--rendezvous-port", "70000"], "--rendezvous-port must be from 1 to 65535, got '70000'"),
    (["--rendezvous-address", "leader;id"], "--rendezvous-address must be an IP address or a DNS name"),
    (["--rendezvous-port", "29500", "--rendezvous-bind", "pod-0"],
     "--rendezvous-bind must be an IPv4 address of this host, got 'pod-0'"),
    (["--rendezvous-bind", "127.0.0.2"], "--rendezvous-bind needs --rendezvous-port"),
])
def test_a_bad_rendezvous_endpoint_names_its_flag(flags, message):
    with pytest.raises(ConfigError, match=message):
        config(*flags)


ADOPTING = ("--leader-election", "--rendezvous-port", "29500", "--adopt-window", "120")


def test_an_adoption_window_reaches_the_workers_and_stops_every_reap():
    """``--adopt-window``: every worker's lease wrapper gets the window; nothing reaps the
    job's other runs (an earlier run's worker waits to be adopted): not hvdrun when this
    launcher dies (no reap ssh), not the prepare hook (no --reap-job); only the plan made for an
    adoption (``for_adoption``, a leader that took the job over) makes horovodrun adopt."""
    from elastic.launch.plan import for_adoption, horovodrun_env
    from tests.elastic.launch.test_plan import plan_of
    plan = plan_of(config("--ssh-identity-file", __file__, *ADOPTING))
    command = list(plan.horovodrun)
    assert command[command.index("elastic.worker.lease"):][:6] == [
        "elastic.worker.lease", "--seconds", "8", "--adopt-window", "120", "--"]
    assert "ELASTIC_REAP_SSH" not in plan.env and plan.env["ELASTIC_ADOPT_WINDOW"] == "120"
    assert "--reap-job" not in plan.daemon.spec.prepare_cmd
    assert "ELASTIC_ADOPT_WORLD" not in horovodrun_env(plan, {"ELASTIC_ADOPT_WORLD": "60"}, "http://d")
    assert horovodrun_env(for_adoption(plan), {}, "http://d")["ELASTIC_ADOPT_WORLD"] == "120"

    plain = plan_of(config("--ssh-identity-file", __file__, "--leader-election"))
    assert "--adopt-window" not in plain.horovodrun and "ELASTIC_REAP_SSH" in plain.env
    assert "--reap-job" in plain.daemon.spec.prepare_cmd


@pytest.mark.parametrize("flags, message", [
    (["--rendezvous-port", "29500", "--adopt-window", "120"], "--adopt-window needs --leader-election"),
    (["--leader-election", "--adopt-window", "120"], "--adopt-window needs --rendezvous-port"),
    ([*ADOPTING, "--lease", "0"], "--adopt-window needs a --lease"),
    (["--leader-election", "--rendezvous-port", "29500", "--adopt-window", "2"], "adoption window must be 0"),
    (["--leader-election", "--rendezvous-port", "29500", "--adopt-window", "soon"],
     "--adopt-window: must be a number of seconds, got 'soon'"),
])
def test_a_bad_adoption_window_names_the_cause(flags, message):
    with pytest.raises(ConfigError, match=message):
        config(*flags)
