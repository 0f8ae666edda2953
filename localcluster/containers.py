"""Pods as containers of the worker image (``local-cluster up --runtime containers --image IMAGE``).

Each pod is one container of ``images/Dockerfile`` run through the image's own entrypoint
(tini + ``worker-entrypoint``): the pod's name as hostname (and in ``/etc/hosts`` with the pod's
IP), ``DIR/pods/<pod>/data`` on ``/data``, the cluster's public key mounted read-only where the
job's SSH Secret would be (the public half only), sshd from the image listening on the pod's
loopback address (the container shares the host's network namespace, so every byte stays on
loopback and the address pool works unchanged), and the least privilege a worker needs: all
capabilities dropped but SETUID, SETGID and SYS_CHROOT (what sshd's privilege separation
uses), and no-new-privileges. ``shared_dirs`` are host directories mounted at the same path in
every container: the local stand-in for a ReadWriteMany volume (a metrics file the launcher
reads, say). Graceful deletion is the engine's stop with the grace period
(SIGTERM to the entrypoint, which forwards it to the job's processes; SIGKILL when it ends).

Pure: ``ContainerSpec`` and ``run_argv(engine, spec)``, ``stop_argv(...)``,
``container_name(cluster_id, namespace, name, uid)``.
I/O (each blocks; ``ContainerError`` on failure): ``find_engine()``, ``check_image(engine, image)``,
``remove_labelled(engine, cluster_id)`` (removes a cluster's leftover containers).
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass

from .errors import ContainerError

LABEL = "io.elastic-horovod.localcluster"
SECRET_DIR = "/etc/elastic-horovod/ssh"
CAPABILITIES = ("SETUID", "SETGID", "SYS_CHROOT")
ENGINES = ("podman",)


@dataclass(frozen=True)
class ContainerSpec:
    """What one pod's container is made of."""

    name: str        # the container's name (container_name())
    image: str
    hostname: str    # the pod's name
    ip: str          # the pod's loopback address: sshd listens there
    ssh_port: int
    data_dir: str    # host directory mounted on /data
    public_key: str  # host file mounted as SECRET_DIR/id_ed25519.pub
    cluster_id: str  # label value shared by the cluster's containers
    shared_dirs: tuple = ()  # host directories mounted at the same path


def cluster_id_of(state_dir: str) -> str:
    """A short stable id for a cluster's state directory (labels, container names)."""
    return hashlib.sha256(state_dir.encode()).hexdigest()[:10]


def container_name(cluster_id: str, namespace: str, name: str, uid: str) -> str:
    """``lc-<cluster>-<namespace>-<pod>-<uid prefix>``: unique per pod incarnation."""
    return f"lc-{cluster_id}-{namespace}-{name}-{uid.replace('-', '')[:8]}"


def run_argv(engine: str, spec: ContainerSpec) -> list[str]:
    """The foreground ``run`` command of a pod's container (removed when it exits)."""
    return [
        engine, "run", "--rm", "--name", spec.name, "--label", f"{LABEL}={spec.cluster_id}",
        "--network", "host", "--hostname", spec.hostname, "--add-host", f"{spec.hostname}:{spec.ip}",
        "--cap-drop", "ALL", *[a for cap in CAPABILITIES for a in ("--cap-add", cap)],
        "--security-opt", "no-new-privileges",
        "--volume", f"{spec.data_dir}:/data",
        "--volume", f"{spec.public_key}:{SECRET_DIR}/id_ed25519.pub:ro",
        *[a for d in spec.shared_dirs for a in ("--volume", f"{d}:{d}")],
        "--env", f"SSH_PORT={spec.ssh_port}", "--env", f"SSH_LISTEN_ADDRESS={spec.ip}",
        spec.image,
    ]


def stop_argv(engine: str, name: str, grace_seconds: int) -> list[str]:
    """SIGTERM to the container's PID 1, SIGKILL after ``grace_seconds``."""
    return [engine, "stop", "--time", str(max(0, int(grace_seconds))), "--", name]


def find_engine() -> str:
    """The container engine on PATH (podman). Raises ContainerError when there is none."""
    for engine in ENGINES:
        if shutil.which(engine):
            return engine
    raise ContainerError("--runtime containers needs podman (as root, scripts/setup installs it)")


def check_image(engine: str, image: str) -> None:
    """Raise ContainerError unless ``image`` exists locally (nothing is pulled)."""
    try:
        done = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", "--", image],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ContainerError(f"{engine} image inspect failed: {exc}") from exc
    if done.returncode != 0:
        raise ContainerError(f"image {image!r} not found in {engine} (build it: scripts/build-images)")


def remove_labelled(engine: str, cluster_id: str) -> None:
    """Force-remove every container of cluster ``cluster_id`` (leftovers of a killed cluster)."""
    try:
        listed = subprocess.run([engine, "ps", "--all", "--quiet", "--filter", f"label={LABEL}={cluster_id}"],
                                capture_output=True, text=True, timeout=60)
        ids = listed.stdout.split()
        if ids:
            subprocess.run([engine, "rm", "--force", "--time", "0", "--", *ids], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ContainerError(f"cannot remove the cluster's containers: {exc}") from exc
