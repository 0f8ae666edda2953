"""Starting, finding and stopping a cluster's background process; worker pods (the CLI's services).

- ``start(paths, ...)`` -> ``(state, started)``: the running cluster of ``paths`` if there is one
  (``started`` False), else a new background process (``python -m localcluster.daemon``) once
  its API answers (``runtime="containers", image=IMAGE``: pods are containers of IMAGE); with
  ``die_with_parent`` it is killed if the calling process dies. ``ClusterError`` with the log's
  last lines if it does not come up.
- ``running_state(paths)`` -> state dict of a live cluster or None (removes a stale state.json).
- ``stop(paths)`` -> True if a cluster was stopped; waits until its process (and so every pod
  process) is gone.
- ``worker_pod(name, slots, gpus, ssh_port)`` (pure) is the template of ``worker-<n>`` pods.
- ``scale``, ``add_pod``, ``wait_ready``, ``status`` act through the API (``Client``).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import pods as podrules
from .client import Client
from .containers import check_image, find_engine
from .errors import ClusterError, ContainerError, NotFound
from .keys import ensure_cluster_key
from .statefiles import StatePaths
from .tls import ensure_certs

WORKER_LABELS = {"app": "elastic-horovod", "role": "worker"}
SLOTS_ANNOTATION = "elastic-horovod/slots"
GPU_RESOURCE = "nvidia.com/gpu"
_WORKER = re.compile(r"^worker-(\d+)$")
# Background processes this process started (kept so they can be reaped by ``stop``).
_CHILDREN: dict[int, subprocess.Popen] = {}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
        with open(f"/proc/{pid}/stat", "rb") as fh:
            zombie = fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False
    return b"localcluster.daemon" in cmd and not zombie


def running_state(paths: StatePaths) -> dict | None:
    state = paths.read_state()
    if state is None:
        return None
    pid = int(state.get("pid", 0))
    if not _alive(pid):
        _forget(paths, pid)
        return None
    return state


def _forget(paths: StatePaths, pid: int) -> None:
    """Reap ``pid`` if this process started it, and remove the cluster's state.json and kubeconfig."""
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait()
    for f in (paths.state, paths.kubeconfig):
        f.unlink(missing_ok=True)


def client(state: dict, timeout: float = 10.0) -> Client:
    return Client(state["api"], state.get("token"), timeout, state.get("ca"))


def admin(state: dict, action: str, timeout: float = 30.0, **query) -> dict:
    return Client(state["admin"], state.get("admin_token"), timeout).request("POST", "/" + action, query=query)


def check_prerequisites(isolation: str, runtime: str = "processes", image: str | None = None) -> None:
    if runtime == "containers":
        if not image:
            raise ClusterError("--runtime containers needs --image IMAGE (scripts/build-images builds it)")
        if shutil.which("ssh-keygen") is None or shutil.which("setpriv") is None:
            raise ClusterError("missing tools: ssh-keygen or setpriv (Debian: openssh-client, util-linux)")
        try:
            check_image(find_engine(), image)
        except ContainerError as exc:
            raise ClusterError(str(exc)) from None
        return
    if not os.path.exists("/usr/sbin/sshd"):
        raise ClusterError("/usr/sbin/sshd not found: install Debian's openssh-server (scripts/setup does)")
    needed = ["ssh-keygen", "setpriv"] + (["unshare", "mount", "hostname"] if isolation == "namespaces" else [])
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        raise ClusterError(f"missing tools: {', '.join(missing)} (Debian: openssh-client, util-linux, hostname)")
    if isolation == "namespaces" and os.geteuid() != 0:
        raise ClusterError("pods with their own hostname and /data need root (namespaces): run as root, "
                           "or pass --isolation none (LOCAL_CLUSTER_ISOLATION=none) for pods without them")


def start(paths: StatePaths, ssh_port: int = 2222, isolation: str = "namespaces", timeout: float = 60.0,
          history: int = 1000, bookmark_interval: float = 5.0, auth: bool = True,
          die_with_parent: bool = False, runtime: str = "processes", image: str | None = None,
          shared_dirs: tuple = (), capacity: int = 0) -> tuple[dict, bool]:
    state = running_state(paths)
    if state is not None:
        return state, False
    check_prerequisites(isolation, runtime, image)
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ClusterError(f"cannot create the state directory {paths.root}: {exc}") from exc
    # made here too (the daemon would make them) so that a process starting many clusters pays
    # the imports once and each daemon starts faster
    ensure_cluster_key(paths)
    ensure_certs(paths.tls_dir)
    # die_with_parent: a test's cluster must not outlive a killed test run (its pods die with it)
    cmd = (["setpriv", "--pdeathsig", "KILL", "--"] if die_with_parent else []) + [
           sys.executable, "-m", "localcluster.daemon", "--state-dir", str(paths.root), "--ssh-port",
           str(ssh_port), "--isolation", isolation, "--history", str(history),
           "--bookmark-interval", str(bookmark_interval)] + ([] if auth else ["--no-auth"]) + (
           ["--runtime", runtime, "--image", image] if runtime == "containers" else []) + [
           a for d in shared_dirs for a in ("--shared-dir", os.path.abspath(d))] + (
           ["--capacity", str(capacity)] if capacity else [])
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        with open(paths.log, "ab") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                    start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ClusterError(f"cannot start the cluster process ({sys.executable}): {exc}") from exc
    _CHILDREN[proc.pid] = proc
    deadline = time.monotonic() + timeout
    while True:
        state = paths.read_state()
        if state is not None and state.get("pid") == proc.pid:
            return state, True
        code = proc.poll()
        if code is not None:
            _CHILDREN.pop(proc.pid, None)
            raise ClusterError(f"the cluster process exited with code {code}: {_log_tail(paths.log)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            _CHILDREN.pop(proc.pid, None)
            raise ClusterError(f"the cluster did not come up within {timeout:.0f}s: {_log_tail(paths.log)}")
        time.sleep(0.02)


def _log_tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-3:])[-400:] + f" (log: {path})"


def stop(paths: StatePaths, timeout: float = 30.0) -> bool:
    state = running_state(paths)
    if state is None:
        return False
    pid = int(state["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)  # its pods die with it (pdeathsig)
        while _alive(pid):
            time.sleep(0.02)
    _forget(paths, pid)
    return True


def worker_pod(name: str, slots: int | None = None, gpus: int = 0, ssh_port: int = 2222,
               labels: dict | None = None, annotations: dict | None = None, node_name: str | None = None) -> dict:
    """The pod template of ``up``/``scale``/``add-pod`` (and of the test handle's create_pod)."""
    ann = dict(annotations or {})
    if slots is not None:
        ann[SLOTS_ANNOTATION] = str(slots)
    container: dict = {"name": "worker", "image": "elastic-horovod/worker:local",
                       "ports": [{"name": "ssh", "containerPort": ssh_port, "protocol": "TCP"}]}
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    meta: dict = {"name": name, "namespace": "default",
                  "labels": dict(WORKER_LABELS if labels is None else labels)}
    if ann:
        meta["annotations"] = ann
    spec: dict = {"containers": [container], "terminationGracePeriodSeconds": 30}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _workers(api: Client) -> list[dict]:
    items = api.list_pods("default", "app=elastic-horovod,role=worker")
    return [p for p in items if _worker_number(p) >= 0]


def _worker_number(pod: dict) -> int:
    """The ``n`` of a ``worker-<n>`` pod; -1 for a pod of any other name."""
    match = _WORKER.match(pod["metadata"]["name"])
    return int(match.group(1)) if match else -1


def next_worker_name(taken: set[str]) -> str:
    n = 0
    while f"worker-{n}" in taken:
        n += 1
    return f"worker-{n}"


def add_pod(state: dict, name: str | None = None, slots: int | None = None, gpus: int = 0) -> dict:
    api = client(state)
    if name is None:
        name = next_worker_name({p["metadata"]["name"] for p in api.list_pods("default")})
    return api.create_pod(worker_pod(name, slots, gpus, state["ssh_port"]))


def scale(state: dict, count: int, slots: int | None = None, gpus: int = 0) -> tuple[list[str], list[str]]:
    """Make the number of live ``worker-<n>`` pods ``count``; returns (created, deleted) names."""
    if count < 0:
        raise ClusterError(f"the worker count must be >= 0, got {count}")
    api = client(state)
    live = [p for p in _workers(api) if not p["metadata"].get("deletionTimestamp")]
    created, deleted = [], []
    taken = {p["metadata"]["name"] for p in api.list_pods("default")}
    for _ in range(count - len(live)):
        name = next_worker_name(taken)
        taken.add(name)
        api.create_pod(worker_pod(name, slots, gpus, state["ssh_port"]))
        created.append(name)
    if len(live) > count:
        live.sort(key=_worker_number)
        for p in live[count:]:
            api.delete_pod(p["metadata"]["name"])
            deleted.append(p["metadata"]["name"])
    return created, deleted


def wait_ready(state: dict, names, timeout: float = 60.0, namespace: str = "default") -> dict[str, str]:
    """Block until every pod of ``names`` is Running and Ready with an IP; returns name -> IP."""
    api = client(state)
    deadline = time.monotonic() + timeout
    pending, ips = set(names), {}
    while pending:
        for name in sorted(pending):
            try:
                pod = api.get_pod(name, namespace)
            except NotFound:
                continue
            status = pod.get("status") or {}
            if status.get("phase") == "Failed":
                raise ClusterError(f"pod {name} failed: {status.get('message', 'unknown reason')}")
            if status.get("phase") == "Running" and podrules.is_ready(pod) and status.get("podIP"):
                ips[name] = status["podIP"]
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise ClusterError(f"pods not Ready after {timeout:.0f}s: {', '.join(sorted(pending))}")
        if pending:
            time.sleep(0.05)
    return ips


def status(state: dict) -> dict:
    items = client(state).list_pods(None)
    return {
        "api": state["api"], "kubeconfig": state["kubeconfig"], "identity": state["identity"],
        "ssh_port": state["ssh_port"],
        "pods": [{"name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"],
                  "phase": (p.get("status") or {}).get("phase"), "ready": podrules.is_ready(p),
                  "ip": (p.get("status") or {}).get("podIP"), "ssh_port": state["ssh_port"],
                  "uid": p["metadata"]["uid"]} for p in items],
    }


