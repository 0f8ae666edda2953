"""elastic-run's plan: every command, path and variable decided before anything runs, so each
decision is asserted here on a value (and ``elastic-run --dry-run`` prints it)."""
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

from elastic.common.reap import JOB_ID_ENV, RUN_ID_ENV
from elastic.driver.hvdrun import LAUNCHER_GONE_SIGNAL, REAP_SSH_ENV, reap_ssh_argv
from elastic.launch.command import HorovodrunOptions
from elastic.launch.events import EVENTS_ENV
from elastic.launch.nccl import NCCL_DEFAULTS
from elastic.launch.plan import LEAVE_GRACE_ENV, LaunchConfig, horovodrun_env, make_plan, plan_as_dict
from elastic.ssh.config import SSH_CONFIG_ENV

TRAIN = ("python", "-m", "training.mnist")
ELASTIC_RUN = str(Path(sys.executable).parent / "elastic-run")


def fake_tool(name: str) -> str:
    return f"/opt/bin/{name}"


def config(**kwargs) -> LaunchConfig:
    opts = {"discovery_script": "/opt/bin/discover-hosts", "min_np": 2, **kwargs.pop("opts", {})}
    return LaunchConfig(horovodrun=HorovodrunOptions(**opts), command=TRAIN,
                        discovery_url=kwargs.pop("discovery_url", "http://127.0.0.1:8642"), **kwargs)


def plan_of(cfg: LaunchConfig):
    return make_plan(cfg, run_id="r1", workdir="/tmp/w", tool=fake_tool, python_bin="/venv/bin")


def test_with_a_selector_and_an_identity_our_daemon_prepares_each_host_itself():
    plan = plan_of(config(selector="app=x", namespace="ns", kubeconfig="/k", dataset="/src:/data",
                          opts={"ssh_identity_file": "/id", "ssh_port": 2222}))
    assert plan.daemon is not None and plan.daemon.prepares_hosts
    assert plan.daemon.spec.selector == "app=x" and plan.daemon.spec.namespace == "ns"
    assert plan.daemon.log_file == "/tmp/w/discovery-daemon.log"
    assert shlex.split(plan.daemon.spec.prepare_cmd) == [
        sys.executable, "-m", "elastic.prepare.hook", "--identity", "/id", "--ssh-dir", "/tmp/w/ssh",
        "--ssh-port", "2222", "--reap-job", plan.job_id, "--keep-run", "r1", "--dataset", "/src:/data"]
    assert [(s.what, s.argv, s.kind) for s in plan.steps] == [
        ("ssh-bootstrap hosts", ("/opt/bin/ssh-bootstrap", "hosts", "--identity", "/id", "--out", "/tmp/w/ssh",
                                 "--port", "2222"), "ssh"),
        ("dataset-sync", ("/opt/bin/dataset-sync", "/src", "/data", "--ssh-config", "/tmp/w/ssh/ssh_config"), "sync"),
    ]


def test_without_an_identity_the_daemon_serves_hosts_unprepared_and_sync_uses_plain_ssh():
    plan = plan_of(config(selector="app=x", dataset="/src:/data"))
    assert plan.daemon is not None and not plan.daemon.prepares_hosts
    assert plan.daemon.spec.prepare_cmd is None
    assert [s.argv for s in plan.steps] == [("/opt/bin/dataset-sync", "/src", "/data")]
    assert plan.reap_ssh_wrapper is None and plan.reap_ssh == ("ssh", "-o", "BatchMode=yes")


def test_without_a_selector_no_daemon_is_planned():
    plan = plan_of(config())
    assert plan.daemon is None and plan.discovery_url == "http://127.0.0.1:8642"
    assert plan.steps == ()


def test_a_given_ssh_dir_is_used_instead_of_the_workdir():
    plan = plan_of(config(ssh_dir="/keys", opts={"ssh_identity_file": "/id"}))
    assert plan.ssh_dir == "/keys"
    assert plan.reap_ssh_wrapper == "/keys/bin/ssh"
    assert plan.reap_ssh == ("ssh", "-o", "BatchMode=yes", "-i", "/id")
    assert plan.env[SSH_CONFIG_ENV] == "/keys/ssh_config"
    assert plan.path_prepend == ("/keys/bin", "/venv/bin")


def test_horovodrun_runs_with_the_wrapper_first_the_url_and_the_users_variables():
    plan = plan_of(config(opts={"ssh_identity_file": "/id", "env": {"A": "new", "DISCOVERY_URL": "user's",
                                                                      "PYTHONUNBUFFERED": "0"}}))
    env = horovodrun_env(plan, {"A": "old", "PATH": "/usr/bin", "HOME": "/root"}, "http://127.0.0.1:9")
    assert env == {"A": "new", "HOME": "/root", "PYTHONUNBUFFERED": "0",
                   "DISCOVERY_URL": "http://127.0.0.1:9", RUN_ID_ENV: "r1", JOB_ID_ENV: plan.job_id,
                   SSH_CONFIG_ENV: "/tmp/w/ssh/ssh_config", EVENTS_ENV: "/tmp/w/driver-events.jsonl",
                   REAP_SSH_ENV: json.dumps([["/tmp/w/ssh/bin/ssh", "-o", "BatchMode=yes"],
                                             ["ssh", "-o", "BatchMode=yes", "-i", "/id"]]),
                   "PATH": "/tmp/w/ssh/bin:/venv/bin:/usr/bin", **NCCL_DEFAULTS}
    assert plan.horovodrun[0] == "horovodrun" and plan.horovodrun[-3:] == TRAIN
    assert "A=new" not in " ".join(plan.horovodrun)  # variables go through the environment


def test_unbuffered_output_is_the_default():
    env = horovodrun_env(plan_of(config()), {}, "http://u")
    assert env["PYTHONUNBUFFERED"] == "1" and env["PATH"] == "/venv/bin:"


def test_nccl_gets_sixteen_tcp_flows_and_its_warnings_unless_the_user_set_them():
    env = horovodrun_env(plan_of(config()), {}, "http://u")
    assert (env["NCCL_SOCKET_NTHREADS"], env["NCCL_NSOCKS_PERTHREAD"], env["NCCL_DEBUG"]) == ("4", "4", "WARN")
    assert int(env["NCCL_SOCKET_NTHREADS"]) * int(env["NCCL_NSOCKS_PERTHREAD"]) <= 64  # NCCL's limit
    mine = horovodrun_env(plan_of(config(opts={"env": {"NCCL_DEBUG": "INFO"}})), {"NCCL_SOCKET_NTHREADS": "2"},
                          "http://u")
    assert (mine["NCCL_SOCKET_NTHREADS"], mine["NCCL_NSOCKS_PERTHREAD"], mine["NCCL_DEBUG"]) == ("2", "4", "INFO")


def test_the_plan_is_plain_data():
    plan = plan_of(config(selector="app=x", dataset="/src:/data", opts={"ssh_identity_file": "/id"}))
    doc = json.loads(json.dumps(plan_as_dict(plan)))
    assert doc["daemon"]["spec"]["selector"] == "app=x"
    assert doc["steps"][1]["argv"][:3] == ["/opt/bin/dataset-sync", "/src", "/data"]


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    with socket.socket() as s:  # nobody answers here: a real run would fail on it
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCOVERY_", "ELASTIC_"))}
    proc = subprocess.run([ELASTIC_RUN, "--dry-run", "--discovery-url", url, "--min-np", "2",
                           "--leave-grace", "30", "-x", "A=1", "--", *TRAIN],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["env"][LEAVE_GRACE_ENV] == "30.0"
    assert doc["discovery_url"] == url and doc["daemon"] is None
    assert doc["horovodrun"][-3:] == list(TRAIN)
    assert doc["horovodrun"][doc["horovodrun"].index("--min-np") + 1] == "2"
    assert doc["env"]["A"] == "1"
    assert not Path(doc["workdir"]).exists()


def test_dry_run_with_bad_input_is_still_exit_2():
    proc = subprocess.run([ELASTIC_RUN, "--dry-run", "--min-np", "0", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --min-np must be a positive integer, got 0"]


def test_the_driver_events_go_to_the_workdir_unless_a_file_is_given():
    default = plan_of(config())
    assert default.events_file == "/tmp/w/driver-events.jsonl" == default.env[EVENTS_ENV]
    given = plan_of(config(events_file="/logs/events.jsonl", stall_timeout=60.0))
    assert given.events_file == "/logs/events.jsonl" == given.env[EVENTS_ENV]
    assert given.stall_timeout == 60.0 and plan_of(config(stall_timeout=None)).stall_timeout is None


def test_leave_grace_reaches_horovodrun_as_horovods_variable():
    assert LEAVE_GRACE_ENV not in plan_of(config()).env  # Horovod's default
    plan = plan_of(config(leave_grace=12.5))
    assert plan.env[LEAVE_GRACE_ENV] == "12.5" and plan.leave_grace == 12.5
    assert float(plan_of(config(leave_grace=0.0)).env[LEAVE_GRACE_ENV]) == 0.0


def test_horovodrun_learns_of_the_launchers_death_by_a_signal_it_handles():
    """hvdrun handles LAUNCHER_GONE_SIGNAL (stops the job, reaps the hosts); the plain script
    gets SIGTERM (Horovod's own shutdown)."""
    hvdrun = plan_of(config(opts={"launcher": ("/venv/bin/python", "-m", "elastic.driver.hvdrun")}))
    assert hvdrun.horovodrun_death_signal == LAUNCHER_GONE_SIGNAL
    assert plan_of(config()).horovodrun_death_signal == signal.SIGTERM


def test_the_reap_ssh_for_hvdrun_is_the_wrapper_once_it_exists(tmp_path):
    wrapper = tmp_path / "ssh"
    value = json.dumps([[str(wrapper), "-o", "BatchMode=yes"], ["ssh", "-p", "2222"]])
    assert reap_ssh_argv(value) == ["ssh", "-p", "2222"]
    wrapper.touch()
    assert reap_ssh_argv(value) == [str(wrapper), "-o", "BatchMode=yes"]
    assert reap_ssh_argv("not json") is None and reap_ssh_argv(None) is None
