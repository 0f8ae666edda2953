"""Test API: ``running_cluster(state_dir, workers=0, **opts)`` yields a ``ClusterHandle``.

The cluster is a real background process (the same one ``local-cluster up`` starts); leaving
the ``with`` block stops it and every pod process, also when the block raised; if the test
process is killed, the cluster dies with it. Options:
``ssh_port`` (2222), ``isolation`` ("namespaces"), ``slots``, ``gpus``, ``timeout`` (120 s),
``history`` (events kept for watches, 1000), ``bookmark_interval`` (seconds, 5.0), ``auth`` (True),
``runtime`` ("processes", or "containers" with ``image``: pods are containers of that image;
``shared_dirs``: host directories mounted at the same path in each of them).

``ClusterHandle`` attributes: ``kubeconfig``, ``identity``, ``ssh_port``, ``api_url``, ``token``,
``state_dir``, ``state`` (state.json), ``client`` (a ``localcluster.client.Client``: ``get_pod``,
``list_pods``, ``create_pod``, ``delete_pod``, ``patch_pod``, ``request``); methods:
``core_v1()``, ``create_pod``, ``delete_pod``, ``wait_ready`` (-> ip), ``wait_gone``, ``status()``,
``set_ready``, ``pod_data_dir``, ``ssh``, and the faults ``restart_api(down_seconds)``,
``drop_watches()``, ``compact_history()``, ``set_latency(seconds)``, ``fail_watches(code)``.
Waits raise ``ClusterError`` on timeout; their default deadlines (120 s to come up, 90 s for a
pod to be Ready or gone, 120 s for an ``ssh`` command, 60 s for its connection) are bounds for
a loaded 2-core machine, not expectations: a wait returns as soon as its condition holds (a
3-worker run of the suite at load 40 failed three pod-ssh tests on the 30 s ``ssh`` had).
"""
from __future__ import annotations

import contextlib
import getpass
import subprocess
import time
from pathlib import Path

from . import control
from .errors import ClusterError, NotFound
from .statefiles import StatePaths


class ClusterHandle:
    """A running local cluster, seen from a test."""

    def __init__(self, paths: StatePaths, state: dict) -> None:
        self.paths = paths
        self.state = state
        self.state_dir: Path = paths.root
        self.kubeconfig: Path = Path(state["kubeconfig"])
        self.identity: Path = Path(state["identity"])
        self.ssh_port: int = int(state["ssh_port"])
        self.api_url: str = state["api"]
        self.token: str | None = state.get("token")
        self.client = control.client(state)

    def core_v1(self):
        """A ``kubernetes.client.CoreV1Api`` configured from this cluster's kubeconfig."""
        from kubernetes import client, config
        return client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))

    def create_pod(self, name: str, labels: dict | None = None, annotations: dict | None = None, gpus: int = 0,
                   namespace: str = "default", node_name: str | None = None) -> dict:
        """Create a pod (labels default to the worker labels); returns the stored object."""
        pod = control.worker_pod(name, None, gpus, self.ssh_port, labels, annotations, node_name)
        pod["metadata"]["namespace"] = namespace
        return self.client.create_pod(pod, namespace)

    def delete_pod(self, name: str, namespace: str = "default", grace_seconds: int | None = None) -> dict:
        return self.client.delete_pod(name, namespace, grace_seconds)

    def wait_ready(self, name: str, timeout: float = 90, namespace: str = "default") -> str:
        """Block until the pod is Running and Ready; returns its IP."""
        return control.wait_ready(self.state, [name], timeout, namespace)[name]

    def wait_gone(self, name: str, timeout: float = 90, namespace: str = "default") -> None:
        """Block until the pod object no longer exists."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.get_pod(name, namespace)
            except NotFound:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"pod {name} still exists after {timeout}s")
            time.sleep(0.05)

    def status(self) -> dict:
        """What ``local-cluster status --json`` prints."""
        return control.status(self.state)

    def set_ready(self, name: str, ready: bool, namespace: str = "default") -> dict:
        """Set the pod's readiness through the API (``PATCH .../status``), as a kubelet whose
        readiness probe passes or fails would: the Ready and ContainersReady conditions and
        each container status' ``ready``. Returns the patched pod."""
        value = "True" if ready else "False"
        status: dict = {"conditions": [{"type": "Ready", "status": value},
                                       {"type": "ContainersReady", "status": value}]}
        current = self.client.get_pod(name, namespace).get("status") or {}
        if current.get("containerStatuses"):
            status["containerStatuses"] = [{"name": c["name"], "ready": ready} for c in current["containerStatuses"]]
        return self.client.patch_pod(name, {"status": status}, namespace, "status",
                                     "application/strategic-merge-patch+json")

    def pod_data_dir(self, name: str, namespace: str = "default") -> Path:
        """The host directory that the pod sees as ``/data`` (``DIR/node/<path>`` for a ``hostPath``);
        for a pod the API no longer has, the pod's own ``data/`` (removed with the pod)."""
        from .volumes import data_volume, host_path

        try:
            pod = self.client.get_pod(name, namespace)
        except NotFound:
            return self.paths.pod_dir(namespace, name) / "data"
        found = host_path(data_volume(pod))
        if found is not None:
            return self.paths.node_root / found[0].lstrip("/")
        return self.paths.pod_dir(namespace, name) / "data"

    def pod_ip(self, name: str, namespace: str = "default") -> str:
        ip = (self.client.get_pod(name, namespace).get("status") or {}).get("podIP")
        if not ip:
            raise ClusterError(f"pod {name} has no IP yet")
        return ip

    def ssh_command(self, ip: str) -> list[str]:
        """The ssh argv (without the remote command) that reaches a pod at ``ip``."""
        return ["ssh", "-i", str(self.identity), "-p", str(self.ssh_port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", "ConnectTimeout=60", f"{getpass.getuser()}@{ip}"]

    def ssh(self, name: str, command: str, timeout: float = 120,
            namespace: str = "default") -> subprocess.CompletedProcess:
        """Run a shell command in the pod over SSH with the cluster key (text output)."""
        return subprocess.run(self.ssh_command(self.pod_ip(name, namespace)) + [command], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    # -- faults ----------------------------------------------------------------------------
    def restart_api(self, down_seconds: float = 0.0) -> None:
        """Stop the API server (dropping every connection), keep it down for ``down_seconds``,
        then serve again on the same port with the same state. Returns once it stopped."""
        control.admin(self.state, "restart-api", down=down_seconds)

    def drop_watches(self) -> int:
        """Abort every open watch connection; returns how many were open."""
        return control.admin(self.state, "drop-watches")["dropped"]

    def compact_history(self) -> int:
        """Forget the event history: watches from older resourceVersions get 410."""
        return control.admin(self.state, "compact")["compacted_to"]

    def fail_watches(self, code: int) -> None:
        """Every new watch answers one ERROR event with HTTP ``code`` and ends (0 to stop)."""
        control.admin(self.state, "fail-watches", code=code)

    def set_latency(self, seconds: float) -> None:
        """Delay every API request by ``seconds`` (0 to stop)."""
        control.admin(self.state, "latency", seconds=seconds)


@contextlib.contextmanager
def running_cluster(state_dir, workers: int = 0, *, ssh_port: int = 2222, isolation: str = "namespaces",
                    slots: int | None = None, gpus: int = 0, timeout: float = 120.0, history: int = 1000,
                    bookmark_interval: float = 5.0, auth: bool = True, runtime: str = "processes",
                    image: str | None = None, shared_dirs: tuple = (), capacity: int = 0):
    """Start a cluster in ``state_dir`` with ``workers`` Ready worker pods; stop it on exit.
    ``capacity``: most pods the node runs at once (0: no limit; ``localcluster.kubelet``)."""
    paths = StatePaths(Path(state_dir).resolve())
    if control.running_state(paths) is not None:
        raise ClusterError(f"a cluster is already running with state dir {paths.root}")
    state, _ = control.start(paths, ssh_port=ssh_port, isolation=isolation, timeout=timeout, history=history,
                             bookmark_interval=bookmark_interval, auth=auth, die_with_parent=True,
                             runtime=runtime, image=image, shared_dirs=shared_dirs, capacity=capacity)
    try:
        handle = ClusterHandle(paths, state)
        if workers:
            created, _ = control.scale(state, workers, slots, gpus)
            control.wait_ready(state, created, timeout)
        yield handle
    finally:
        control.stop(paths)
