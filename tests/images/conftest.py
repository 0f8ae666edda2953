"""Fixtures of the image tests: the built images, a loopback address block, worker containers.

The tests that run containers need root and podman (scripts/setup installs podman and runc and
writes the container settings when it runs as root). Where the machine cannot run containers
they are skipped with a one-line reason, and fail with it in CI (tests/needs.py); where it
can, the images are built once per session
with scripts/build-images (cached layers and wheels make a rebuild take seconds) and a failed
build fails the tests.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.needs import missing
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TAG = "test"
WORKER = f"localhost/elastic-horovod:{TAG}"
DAEMON = f"localhost/elastic-horovod-daemon:{TAG}"
CAPABILITIES = ("SETUID", "SETGID", "SYS_CHROOT")




def containers_unavailable() -> str | None:
    """Why this machine cannot run the image tests, or None when it can."""
    if os.geteuid() != 0:
        return "the image tests need root (podman with runc, as scripts/setup sets up as root)"
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/setup installs it when run as root)"
    probe = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return f"podman cannot run here: {(probe.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


@pytest.fixture(scope="session")
def images():
    """Build both images (scripts/build-images) once per session; (worker, daemon) names."""
    reason = containers_unavailable()
    if reason:
        missing(reason)
    started = time.monotonic()
    build = subprocess.run([str(ROOT / "scripts" / "build-images"), "--tag", TAG],
                           capture_output=True, text=True, timeout=3600)
    if build.returncode != 0:
        pytest.fail(f"scripts/build-images failed ({build.returncode}):\n{build.stderr[-3000:]}")
    print(f"\nimages built in {time.monotonic() - started:.0f} s:\n{build.stdout}")
    return WORKER, DAEMON


@pytest.fixture
def address_block():
    """A free ``127.A.B`` prefix of this machine, held for the test."""
    from localcluster.addresses import claim_block

    prefix, lock = claim_block()
    try:
        yield prefix
    finally:
        lock.close()


@pytest.fixture
def job_key(tmp_path):
    """A job key pair: (private key path, directory holding only the public half)."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=60)
    secret = tmp_path / "secret"
    secret.mkdir()
    shutil.copy(key.with_suffix(".pub"), secret / "id_ed25519.pub")
    return key, secret


class Worker:
    """One worker container run through the image's entrypoint, least-privilege as in deploy/."""

    def __init__(self, image: str, ip: str, port: int, secret: Path, data: Path, key: Path,
                 env: dict | None = None, volumes: dict | None = None) -> None:
        self.image, self.ip, self.port, self.secret, self.data, self.key = image, ip, port, secret, data, key
        self.name = f"eh-test-{uuid.uuid4().hex[:10]}"
        self.env = env or {}
        self.volumes = volumes or {}  # host directory -> path in the container
        self.proc: subprocess.Popen | None = None
        self.log = data.parent / f"{self.name}.log"

    def argv(self) -> list[str]:
        caps = [a for cap in CAPABILITIES for a in ("--cap-add", cap)]
        envs = [a for k, v in {"SSH_PORT": str(self.port), "SSH_LISTEN_ADDRESS": self.ip, **self.env}.items()
                for a in ("--env", f"{k}={v}")]
        vols = [a for host, inside in self.volumes.items() for a in ("--volume", f"{host}:{inside}")]
        return ["podman", "run", "--rm", "--name", self.name, "--network", "host", "--hostname", "worker-t",
                "--cap-drop", "ALL", *caps, "--security-opt", "no-new-privileges",
                "--volume", f"{self.secret}:/etc/elastic-horovod/ssh:ro", "--volume", f"{self.data}:/data",
                *vols, *envs, self.image]

    def start(self) -> Worker:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        return self

    def ready(self) -> bool:
        import socket

        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"container exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            with socket.create_connection((self.ip, self.port), timeout=1) as s:
                s.settimeout(2)
                return s.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def wait_ready(self, timeout: float = 120) -> Worker:
        wait_for(self.ready, timeout, f"sshd of {self.name} on {self.ip}:{self.port}", interval=0.2)
        return self

    def ssh_argv(self, *extra: str) -> list[str]:
        return ["ssh", "-i", str(self.key), "-p", str(self.port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", "ConnectTimeout=20", *extra, f"root@{self.ip}"]

    def ssh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.ssh_argv() + [command], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def stop(self, grace: int = 10) -> float:
        """``podman stop --time grace``; returns the seconds it took."""
        started = time.monotonic()
        subprocess.run(["podman", "stop", "--time", str(grace), self.name], capture_output=True, timeout=grace + 120)
        if self.proc is not None:
            self.proc.wait(timeout=60)
        return time.monotonic() - started

    def remove(self) -> None:
        subprocess.run(["podman", "rm", "--force", "--time", "0", self.name], capture_output=True, timeout=120)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def run_worker(images, address_block, job_key, tmp_path):
    """``run_worker(n, env=None, volumes=None)`` starts the n-th worker container (address
    prefix.n; a second call with the same n is that worker's container started again, as the
    kubelet restarts a container in its pod); all are removed after the test."""
    started: list[Worker] = []
    key, secret = job_key

    def start(n: int, env: dict | None = None, wait: bool = True, volumes: dict | None = None) -> Worker:
        w = Worker(images[0], f"{address_block}.{n}", 2222, secret, tmp_path / f"data{n}", key, env,
                   volumes).start()
        started.append(w)
        return w.wait_ready() if wait else w

    yield start
    for w in started:
        w.remove()
