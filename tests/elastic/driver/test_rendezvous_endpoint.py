"""The rendezvous server's fixed endpoint (``elastic.driver.rendezvous_endpoint``,
``hvdrun.install_rendezvous_endpoint``): the port it listens on and the address its workers are
told, where a second launcher of the job answers the world the first one started. Through the
project's real ``horovodrun`` and Horovod's real rendezvous and notification services."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.driver import rendezvous_endpoint
from elastic.errors import BadEndpoint, PortTaken
from tests.runtime.test_horovod_patches import HOROVODRUN, Job, discovery_script, read_log, run_env
from tests.waiting import free_port, wait_for

JOB = str(Path(__file__).parents[2] / "runtime" / "elastic_grow_job.py")



def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if b"=" in item)


@pytest.mark.horovod
@pytest.mark.timeout(400)
def test_workers_reach_the_fixed_endpoint_and_the_world_grows(tmp_path):
    """horovodrun with a fixed port and an advertised address (127.0.0.2: this machine, but not
    the launcher's own address, which Horovod would tell): each worker's environment holds that
    address and port; the world of one reaches the rendezvous there (its hvd.init, its
    notification service's registration), and grows to two when a host is added."""
    port = free_port()
    script, hosts, _ = discovery_script(tmp_path, "localhost:1\n")
    log, started, gate = tmp_path / "grow.jsonl", tmp_path / "started", tmp_path / "gate"
    gate.touch()
    env = run_env(GROW_LOG=str(log), GROW_TARGET_SIZE="2", GROW_STEPS_AFTER="5", GROW_MAX_STEPS="400",
                  GROW_STARTED=str(started), GROW_GATE=str(gate),
                  ELASTIC_RENDEZVOUS_PORT=str(port), ELASTIC_RENDEZVOUS_ADDRESS="127.0.0.2")
    job = Job(tmp_path, [HOROVODRUN, "-np", "1", "--min-np", "1", "--max-np", "2",
                         "--host-discovery-script", str(script), "--network-interface", "lo",
                         "--elastic-timeout", "120", sys.executable, JOB], env)
    try:
        first = wait_for(lambda: list(tmp_path.glob("started.localhost.*")), 180, "the first worker to start",
                         detail=job.output)[0]
        environ = _environ(int(first.name.rsplit(".", 1)[1]))
        assert (environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == \
            ("127.0.0.2", str(port))
        hosts.write_text("localhost:1\n127.0.0.1:1\n")
        job.proc.wait(timeout=300)
        assert job.proc.returncode == 0, job.output()
    finally:
        job.close()
    grown = [r for r in read_log(log) if r["size"] == 2]
    assert {r["host"] for r in grown} == {"localhost", "127.0.0.1"}, job.output()


def _horovodrun(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    script, _, _ = discovery_script(tmp_path, "localhost:1\n")
    return subprocess.run(
        [HOROVODRUN, "-np", "1", "--min-np", "1", "--max-np", "1", "--host-discovery-script", str(script),
         "--network-interface", "lo", sys.executable, "-c", "pass"],
        env=run_env(**env), capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(200)
def test_a_taken_port_ends_horovodrun_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _horovodrun(tmp_path, ELASTIC_RENDEZVOUS_PORT=str(port))
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"horovodrun: error: the rendezvous server cannot listen on port {port}: Address already in use"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name, value, says", [
    ("ELASTIC_RENDEZVOUS_PORT", "0", "ELASTIC_RENDEZVOUS_PORT must be from 1 to 65535, got '0'"),
    ("ELASTIC_RENDEZVOUS_PORT", "http", "ELASTIC_RENDEZVOUS_PORT must be a TCP port number, got 'http'"),
    ("ELASTIC_RENDEZVOUS_ADDRESS", "a b;rm", "ELASTIC_RENDEZVOUS_ADDRESS must be an IP address or a DNS name"),
], ids=["port-zero", "port-name", "address"])
def test_a_bad_setting_ends_horovodrun_with_one_line_before_anything_starts(tmp_path, name, value, says):
    done = _horovodrun(tmp_path, **{name: value})
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"horovodrun: error: {says}"), line


@pytest.mark.parametrize("raw", ["10.0.0.7", "::1", "rendezvous.jobs.svc.cluster.local", "leader-0",
                                 "leader-0.svc."])
def test_an_ip_or_a_dns_name_is_an_address(raw):
    assert rendezvous_endpoint.parse_address(raw, "X") == raw


@pytest.mark.parametrize("raw", ["", "a b", "-lead", "x" * 64, "a..b", "host:29500", "$(id)"])
def test_anything_else_is_not_an_address(raw):
    with pytest.raises(BadEndpoint, match="X must be an IP address or a DNS name"):
        rendezvous_endpoint.parse_address(raw, "X")


@pytest.mark.parametrize("raw, port", [("1", 1), ("29500", 29500), ("65535", 65535)])
def test_a_port_from_1_to_65535(raw, port):
    assert rendezvous_endpoint.parse_port(raw, "X") == port


@pytest.mark.parametrize("raw", ["0", "65536", "-1", "x", "1.5", ""])
def test_anything_else_is_not_a_port(raw):
    with pytest.raises(BadEndpoint, match="X must be"):
        rendezvous_endpoint.parse_port(raw, "X")


def test_a_port_in_use_is_waited_for_when_asked_and_named_once_the_wait_is_over():
    """An adopting horovodrun waits for the port a lost launcher's ending process still holds
    (``install(..., wait)``): bound once that process lets it go; still held past the wait,
    one error naming the port."""
    import socketserver
    import threading

    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    port = holder.getsockname()[1]
    threading.Timer(1.0, holder.close).start()
    server, bound = rendezvous_endpoint._bind_exactly(port, wait=60.0)(
        lambda addr: socketserver.TCPServer(addr, socketserver.BaseRequestHandler))
    server.server_close()
    assert bound == port

    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        taken = held.getsockname()[1]
        with pytest.raises(PortTaken, match=f"cannot listen on port {taken}"):
            rendezvous_endpoint._bind_exactly(taken, wait=0.5)(
                lambda addr: socketserver.TCPServer(addr, socketserver.BaseRequestHandler))


def test_two_launchers_bound_to_their_own_addresses_share_the_port():
    """``--rendezvous-bind``: each launcher's server listens on its own address (a pod's IP;
    here two of 127.0.0.0/8), so one frozen holding the port there leaves it free on the other's."""
    import socketserver

    port = free_port()
    bind = rendezvous_endpoint._bind_exactly
    first, _ = bind(port, host="127.0.0.2")(lambda addr: socketserver.TCPServer(addr, socketserver.BaseRequestHandler))
    try:
        second, bound = bind(port, host="127.0.0.3")(
            lambda addr: socketserver.TCPServer(addr, socketserver.BaseRequestHandler))
        second.server_close()
        assert bound == port and first.server_address == ("127.0.0.2", port)
        with pytest.raises(PortTaken, match=f"cannot listen on 127.0.0.2:{port}: Address already in use"):
            bind(port, host="127.0.0.2")(lambda addr: socketserver.TCPServer(addr, socketserver.BaseRequestHandler))
    finally:
        first.server_close()


@pytest.mark.parametrize("raw", ["127.0.0.2", "10.1.2.3"])
def test_an_ipv4_address_is_a_bind_address(raw):
    assert rendezvous_endpoint.parse_bind(raw, "X") == raw


@pytest.mark.parametrize("raw", ["", "::1", "leader-0", "127.0.0.1:29400", "0x7f000001"])
def test_anything_else_is_not_a_bind_address(raw):
    with pytest.raises(BadEndpoint, match="X must be an IPv4 address of this host"):
        rendezvous_endpoint.parse_bind(raw, "X")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("env, says", [
    ({"ELASTIC_RENDEZVOUS_BIND": "127.0.0.2"},
     (2, "ELASTIC_RENDEZVOUS_BIND needs ELASTIC_RENDEZVOUS_PORT: it names where the fixed port is listened on")),
    ({"ELASTIC_RENDEZVOUS_BIND": "pod-0", "ELASTIC_RENDEZVOUS_PORT": "{port}"},
     (2, "ELASTIC_RENDEZVOUS_BIND must be an IPv4 address of this host, got 'pod-0'")),
    ({"ELASTIC_RENDEZVOUS_BIND": "192.0.2.1", "ELASTIC_RENDEZVOUS_PORT": "{port}"},
     (1, "the rendezvous server cannot listen on 192.0.2.1:{port}: Cannot assign requested address")),
], ids=["no-port", "a-name", "not-this-hosts"])
def test_a_bad_bind_address_ends_horovodrun_with_one_line(tmp_path, env, says):
    port = free_port()
    done = _horovodrun(tmp_path, **{name: value.format(port=port) for name, value in env.items()})
    code, line = says
    assert done.returncode == code, done.stderr
    assert done.stderr.strip().splitlines() == [f"horovodrun: error: {line.format(port=port)}"]
