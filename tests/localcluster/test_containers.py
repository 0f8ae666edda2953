"""localcluster.containers: the container of a pod (pure argv) and the CLI's --runtime checks.

The containers themselves are run by tests/images (they need the built image)."""
from __future__ import annotations

import pytest

from localcluster import cli
from localcluster.containers import ContainerSpec, cluster_id_of, container_name, run_argv, stop_argv


def spec(**kw) -> ContainerSpec:
    base = dict(name="lc-abc-default-worker-0-1234abcd", image="elastic-horovod:0.1.0", hostname="worker-0",
                ip="127.31.7.4", ssh_port=2222, data_dir="/s/pods/worker-0/data", public_key="/s/ssh/authorized_keys",
                cluster_id="abc")
    base.update(kw)
    return ContainerSpec(**base)


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_a_pod_container_is_least_privilege_on_the_host_network_with_only_the_public_key():
    argv = run_argv("podman", spec())
    assert argv[:3] == ["podman", "run", "--rm"] and argv[-1] == "elastic-horovod:0.1.0"
    assert pairs(argv, "--cap-drop") == ["ALL"]
    assert pairs(argv, "--cap-add") == ["SETUID", "SETGID", "SYS_CHROOT"]
    assert pairs(argv, "--security-opt") == ["no-new-privileges"]
    assert pairs(argv, "--network") == ["host"]
    assert pairs(argv, "--hostname") == ["worker-0"] and pairs(argv, "--add-host") == ["worker-0:127.31.7.4"]
    assert pairs(argv, "--volume") == ["/s/pods/worker-0/data:/data",
                                       "/s/ssh/authorized_keys:/etc/elastic-horovod/ssh/id_ed25519.pub:ro"]
    assert pairs(argv, "--env") == ["SSH_PORT=2222", "SSH_LISTEN_ADDRESS=127.31.7.4"]
    assert pairs(argv, "--label") == ["io.elastic-horovod.localcluster=abc"]
    assert "--privileged" not in argv


def test_shared_dirs_are_mounted_at_the_same_path():
    argv = run_argv("podman", spec(shared_dirs=("/tmp/x", "/srv/y")))
    assert pairs(argv, "--volume")[2:] == ["/tmp/x:/tmp/x", "/srv/y:/srv/y"]


def test_names_and_stop():
    assert container_name("abc", "default", "worker-0", "0f1e2d3c-aaaa-bbbb") == "lc-abc-default-worker-0-0f1e2d3c"
    assert cluster_id_of("/a") == cluster_id_of("/a") != cluster_id_of("/b")
    assert stop_argv("podman", "n", 30) == ["podman", "stop", "--time", "30", "--", "n"]
    assert stop_argv("podman", "n", -3)[3] == "0"


@pytest.mark.parametrize("argv, message", [
    (["up", "--runtime", "containers"], "--runtime containers needs --image IMAGE"),
    (["up", "--image", "x:1"], "--image and --shared-dir are only for --runtime containers"),
    (["up", "--runtime", "containers", "--image", "x:1", "--shared-dir", "/no/such/dir"],
     "--shared-dir '/no/such/dir' is not a directory"),
])
def test_bad_runtime_flags_exit_2_with_one_error_line(argv, message, capsys, tmp_path):
    assert cli.main(["--state-dir", str(tmp_path / "s"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: " + message)
    assert not (tmp_path / "s").exists()
