"""Helpers for tests of a real ``discovery-daemon`` process against the local cluster (the
discovery tests and the launcher's push discovery tests).

``start_daemon(cluster, *flags)`` starts ``python -m discovery.cli`` with the cluster's
kubeconfig on a free loopback port and returns a ``Daemon`` once it logged ``listening``;
``tests/conftest.py``'s ``daemon`` fixture starts them for a test and stops each (SIGTERM,
then SIGKILL) when it ends, also on failure.
``fake_pod(cluster, name, ip, ...)`` makes a cheap pod bound to node ``elsewhere`` (stored,
never run) and sets its status as a remote kubelet would.

The waits' deadlines are bounds for a loaded 2-core machine, not expectations: a wait returns
as soon as its condition holds. The daemon imports aiohttp and the kubernetes client before it
listens: a few seconds idle, 60-90 s measured at a load average of 30-50 on 2 cores (six
suites at once); the 30 s it had failed 8 discovery tests there while the product was right.
"""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
SELECTOR = "app=elastic-horovod,role=worker"
START_TIMEOUT = 180.0  # until the daemon logs "listening"
WAIT_TIMEOUT = 60.0    # until what it serves follows a change of the pods


class Daemon:
    """A running daemon process; HTTP helpers that wait on conditions, never fixed sleeps."""

    def __init__(self, proc: subprocess.Popen, env: dict[str, str]) -> None:
        self.proc = proc
        self.env = env
        self.lines: list[str] = []
        self.url = ""
        self.token: str | None = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if '"msg": "listening"' in line:
                self.url = json.loads(line)["url"]
                self._listening.set()
        self._listening.set()

    def wait_listening(self, timeout: float = START_TIMEOUT) -> None:
        if not self._listening.wait(timeout) or not self.url:
            raise AssertionError("daemon did not start:\n" + "\n".join(self.lines[-20:]))

    def get(self, path: str, token: str | None = None) -> tuple[int, dict[str, str], str]:
        assert self.url.startswith("http://")
        host, port = self.url[7:].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    def hosts(self, group: str | None = None) -> list[str] | None:
        """The served host lines, or None when /hosts is not 200."""
        status, _, body = self.get("/hosts" + (f"?group={group}" if group else ""), self.token)
        return body.splitlines() if status == 200 else None

    def json(self, path: str = "/hosts.json") -> dict[str, Any]:
        status, _, body = self.get(path, self.token)
        assert status == 200, body
        return json.loads(body)

    def metric(self, name: str) -> float:
        status, _, body = self.get("/metrics", self.token)
        assert status == 200
        total, found = 0.0, False
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
                found = True
        assert found, f"metric {name} not exported"
        return total

    def wait_for(self, cond: Callable[[], Any], timeout: float = WAIT_TIMEOUT, what: str = "condition") -> Any:
        """``tests.waiting.wait_for`` that also fails at once when the daemon exits."""
        def alive() -> None:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited ({self.proc.returncode}) waiting for {what}:\n"
                                     + "\n".join(self.lines[-20:]))
        return wait_for(cond, timeout, what, interval=0.02, alive=alive, detail=lambda: "\n".join(self.lines[-10:]))

    def wait_hosts(self, expected: list[str], group: str | None = None, timeout: float = WAIT_TIMEOUT) -> None:
        self.wait_for(lambda: self.hosts(group) == expected, timeout, f"hosts == {expected}")

    def wait_host_set(self, expected: list[str], group: str | None = None, timeout: float = WAIT_TIMEOUT) -> None:
        """Like ``wait_hosts`` but in any order (pods created within one second tie on time)."""
        self.wait_for(lambda: sorted(self.hosts(group) or ["-"]) == sorted(expected), timeout,
                      f"host set == {sorted(expected)}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(60)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return self.proc.returncode


def daemon_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISCOVERY_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def start_daemon(cluster: Any, *flags: str, env: dict[str, str] | None = None, wait: bool = True,
                 selector: str = SELECTOR, token: str | None = None) -> Daemon:
    """A ``discovery-daemon`` for ``cluster``'s pods (see the module docstring); the caller stops it."""
    argv = [sys.executable, "-m", "discovery.cli", "--kubeconfig", str(cluster.kubeconfig),
            "--namespace", "default", "--selector", selector, "--host", "127.0.0.1",
            "--port", "0", *flags]
    if token:
        argv += ["--token", token]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=daemon_env(env), cwd=ROOT)
    d = Daemon(proc, daemon_env(env))
    d.token = token
    if wait:
        try:
            d.wait_listening()
        except BaseException:
            d.stop()
            raise
    return d


def fake_pod(cluster: Any, name: str, ip: str | None, *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, gpus: int = 0, ready: bool = True,
             namespace: str = "default") -> dict:
    """A pod bound to node ``elsewhere`` (never run), then Running/Ready/podIP via PATCH /status."""
    cluster.create_pod(name, labels=labels, annotations=annotations, gpus=gpus, namespace=namespace,
                       node_name="elsewhere")
    status: dict[str, Any] = {"phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return cluster.client.patch_pod(name, {"status": status}, namespace, "status",
                                    "application/strategic-merge-patch+json")
