"""The state directory's layout and its atomic file writes.

``DIR/kubeconfig``            kubeconfig for kubectl and the official client
``DIR/state.json``            the running cluster: pid, api and admin URLs, token, ssh port, block
``DIR/daemon.log``            the background process' log
``DIR/ssh/id_ed25519[.pub]``  the key every pod accepts; ``DIR/ssh/authorized_keys`` its public half
``DIR/tls/ca.crt``            the CA of the API server's certificate (HTTPS: kubectl sends tokens only over TLS)
``DIR/pods/<pod>/``           one pod's files (``data/`` is the pod's ``/data``; pods of a namespace
                              other than ``default`` live under ``DIR/pods/_<namespace>/<pod>/``)
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

from shared.atomicfile import write_atomic as _write_atomic
from shared.environment import XDG_CACHE_HOME


def default_state_dir() -> Path:
    base = os.environ.get(XDG_CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "elastic-horovod" / "local-cluster"


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """``shared.atomicfile.write_atomic`` (the project's one atomic writer), creating missing
    parent directories: the state directory's layout is made as files are written."""
    _write_atomic(path, text, mode, parents=True)


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def identity(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.ssh_dir / "authorized_keys"

    @property
    def tls_dir(self) -> Path:
        return self.root / "tls"

    @property
    def node_root(self) -> Path:
        """The node's own file system, where ``hostPath`` volumes live (``localcluster.volumes``):
        kept when a pod is gone."""
        return self.root / "node"

    @property
    def pods_dir(self) -> Path:
        return self.root / "pods"

    def pod_dir(self, namespace: str, name: str) -> Path:
        if namespace == "default":
            return self.pods_dir / name
        return self.pods_dir / f"_{namespace}" / name

    def read_state(self) -> dict | None:
        """The state.json of a cluster (running or not), or None when there is none."""
        try:
            return json.loads(self.state.read_text())
        except (OSError, ValueError):
            return None


def render_kubeconfig(api_url: str, token: str | None, ca_pem: bytes | None = None,
                      name: str = "local-cluster") -> str:
    """A kubeconfig (JSON, which is YAML) for ``api_url`` with a bearer ``token`` and CA."""
    user: dict = {"token": token} if token else {}
    cluster: dict = {"server": api_url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    return json.dumps(doc, indent=2) + "\n"
