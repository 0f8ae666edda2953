"""The local cluster's Service (``localcluster.serviceproxy``): each new connection goes to the
backend its readiness probe finds Ready, judged as the kubelet judges deploy/'s probe; a
backend frozen (SIGSTOP: its kernel still accepts, nothing answers) stops being Ready and the
next connection goes to the other one; with none Ready a connection is refused. Backends are
real HTTP servers in their own processes on two 127.0.0.0/8 addresses."""
from __future__ import annotations

import http.client
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.addresses import claim_block
from localcluster.serviceproxy import Probe, Readiness, ServiceProxy, probe_from_manifest
from tests.waiting import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
FAST = Probe(path="/who", period=0.2, timeout=0.5, failure_threshold=2)


def test_the_probe_is_read_from_deploys_launcher():
    probe = probe_from_manifest(ROOT / "deploy" / "job" / "launcher.yaml", "launcher")
    assert probe == Probe("/elastic-run-lease/-", period=2.0, timeout=2.0, failure_threshold=2, success_threshold=1)


def test_readiness_follows_the_thresholds():
    """Not Ready at first; Ready after 2 successes in a row, not Ready after 2 failures in a row."""
    r = Readiness(Probe(failure_threshold=2, success_threshold=2))
    seen = []
    for ok in (True, True, False, True, False, False, True, True):
        r.observe(ok)
        seen.append(r.ready)
    assert seen == [False, True, True, True, True, False, False, True]


@pytest.mark.parametrize("argv, says", [
    (["--listen", "localhost:80", "--backend", "127.0.0.1:1"], "--listen must be IPv4:PORT, got 'localhost:80'"),
    (["--listen", "127.0.0.1:1", "--backend", "127.0.0.1"], "--backend must be IPv4:PORT, got '127.0.0.1'"),
    (["--listen", "127.0.0.1:0", "--backend", "127.0.0.1:1", "--period", "0"], "--period"),
    (["--backend", "127.0.0.1:1"], "--listen"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says):
    done = subprocess.run([sys.executable, "-m", "localcluster.serviceproxy", *argv], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and says in line, line


class Backend:
    """``python -m http.server`` on ``address:port`` serving a file ``who`` that names it."""

    def __init__(self, tmp: Path, name: str, address: str, port: int):
        root = tmp / name
        root.mkdir()
        (root / "who").write_text(name)
        self.proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", address, "--directory",
                                      str(root), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self):
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait()


def ask(service: tuple[str, int]) -> str:
    conn = http.client.HTTPConnection(*service, timeout=10)
    try:
        conn.request("GET", "/who")
        return conn.getresponse().read().decode()
    except OSError as exc:
        return type(exc).__name__
    finally:
        conn.close()


@pytest.mark.timeout(120)
def test_connections_follow_the_ready_backend(tmp_path):
    prefix, lock = claim_block()
    port = free_port()
    first, second = (f"{prefix}.2", port), (f"{prefix}.3", port)
    lines: list[str] = []
    proxy = ServiceProxy((f"{prefix}.1", port), [first, second], FAST, say=lines.append).start()
    backends = []
    try:
        assert ask(proxy.address) == "ConnectionResetError"  # nobody Ready: rejected
        backends.append(Backend(tmp_path, "first", *first))
        wait_for(lambda: proxy.ready() == [first], 60, "the first backend to be Ready", detail=lambda: str(lines))
        assert ask(proxy.address) == "first"

        backends[0].proc.send_signal(signal.SIGSTOP)  # frozen: accepted by its kernel, never answered
        backends.append(Backend(tmp_path, "second", *second))
        wait_for(lambda: proxy.ready() == [second], 60, "the frozen backend out, the second in",
                 detail=lambda: str(lines))
        assert ask(proxy.address) == "second"
        assert any(line.startswith(f"serviceproxy: {first[0]}:{port} not Ready: ") for line in lines), lines
    finally:
        proxy.stop()
        for backend in backends:
            backend.close()
        lock.close()
