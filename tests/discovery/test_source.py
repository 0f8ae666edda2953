"""The ``HostSource`` seam: ``DiscoveryService`` serves the hosts of whatever source it is given.
A ``StaticFileSource`` (a JSON file of pods) is the second source next to the Kubernetes watch."""
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from discovery.errors import ConfigError
from discovery.file_source import StaticFileSource
from discovery.hosts import Rules
from discovery.kube_source import KubernetesSource
from discovery.service import DiscoveryService
from discovery.source import HostSource
from tests.waiting import wait_for

from .podspec import pod

ROOT = Path(__file__).resolve().parents[2]


def test_the_service_serves_a_static_files_hosts(tmp_path):
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"items": [pod("w-0", ip="10.0.0.1"), pod("w-1", ip="10.0.0.2"),
                                          pod("w-2", ip="10.0.0.3", ready="False")]}))

    async def serve() -> list[str]:
        source = StaticFileSource(str(path))
        async with DiscoveryService(source, Rules()) as svc:
            table = await svc.wait_for(lambda t: t.synced, timeout=30)
            assert not svc.stale and source.alive
            return [f"{h.host}:{h.slots}" for h in table.hosts]

    assert sorted(asyncio.run(serve())) == ["10.0.0.1:1", "10.0.0.2:1"]


@pytest.mark.parametrize("text, message", [
    ("{", "is not JSON"),
    ('{"items": [1]}', "expected a list of pods"),
])
def test_a_bad_pods_file_is_a_config_error(tmp_path, text, message):
    path = tmp_path / "pods.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        StaticFileSource(str(path))
    with pytest.raises(ConfigError, match="cannot read pods file"):
        StaticFileSource(str(tmp_path / "missing.json"))


def test_both_sources_keep_the_protocol():
    def members(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}
    wanted = {"start", "stop", "drain", "status", "alive"}
    assert wanted <= members(HostSource)
    assert wanted <= members(KubernetesSource) and wanted <= members(StaticFileSource)


def test_the_service_and_the_contract_import_no_kubernetes_client():
    """The service takes any ``HostSource``: neither it nor the contract loads the Kubernetes
    client (a file source, or a new one, runs without it)."""
    code = ("import sys, discovery.service, discovery.source, discovery.file_source; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'discovery.watch')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr


def test_the_daemon_serves_a_pods_file(tmp_path):
    """``discovery-daemon --pods-file FILE``: a fixed set of hosts, no API server (no kubeconfig
    is read); discover-hosts prints its Ready pods."""
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"items": [pod("w-0", ip="10.0.0.1"), pod("w-1", ip="10.0.0.2", ready="False")]}))
    sock = tmp_path / "d.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISCOVERY_")}
    env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
    proc = subprocess.Popen([sys.executable, "-m", "discovery.cli", "--pods-file", str(path), "--socket", str(sock)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    try:
        def hosts() -> str:
            if not sock.exists():
                return ""
            out = subprocess.run([sys.executable, "-m", "discovery.discover_hosts", "--url", f"unix:{sock}"],
                                 capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
                                 stdin=subprocess.DEVNULL)
            return out.stdout
        def alive() -> None:
            if proc.poll() is not None:
                raise AssertionError(f"the daemon ended: {proc.stderr.read() if proc.stderr else ''}")
        wait_for(lambda: hosts() == "10.0.0.1:1\n", 120, "the pods file's Ready pod served", alive=alive)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


@pytest.mark.parametrize("flags, message", [
    (["--pods-file", "/nonexistent/pods.json"],
     "cannot read pods file /nonexistent/pods.json: No such file or directory"),
    (["--pods-file", "/nonexistent/pods.json", "--selector", "app=x"],
     "--pods-file and --selector exclude each other: a file or the API server"),
])
def test_a_bad_pods_file_flag_is_one_line_and_exit_2(flags, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISCOVERY_")}
    proc = subprocess.run([sys.executable, "-m", "discovery.cli", *flags, "--port", "0"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [f"error: {message}"])
