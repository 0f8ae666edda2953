"""SSH keys of the local cluster, made with ssh-keygen and put in place atomically.

- ``make_keypair(path, comment, error)``: an ed25519 pair at ``path`` and ``path.pub`` unless
  ``path`` exists; generated under temporary names and renamed (the public half first), so a
  reader never finds a half-written key; ``error`` (a ``LocalClusterError`` class) on failure.
- ``ensure_cluster_key(paths)``: the cluster's key ``DIR/ssh/id_ed25519`` (made once) and
  ``authorized_keys`` from it (``statefiles.write_atomic``, localcluster's one atomic writer).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .errors import ClusterError, LocalClusterError
from .statefiles import StatePaths, write_atomic


def make_keypair(path: str | os.PathLike, comment: str, error: type[LocalClusterError]) -> None:
    """Write an ed25519 key pair at ``path`` (+ ``.pub``) unless ``path`` exists; blocks."""
    target = Path(path)
    if target.exists():
        return
    tmp = target.with_name(f".{target.name}.tmp")
    for p in (tmp, tmp.with_name(tmp.name + ".pub")):
        if p.exists():
            p.unlink()
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(tmp)],
                       check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise error(f"ssh-keygen could not write a key at {target}: {exc}") from exc
    os.replace(tmp.with_name(tmp.name + ".pub"), target.with_name(target.name + ".pub"))
    os.replace(tmp, target)


def ensure_cluster_key(paths: StatePaths) -> None:
    """Create ``DIR/ssh/id_ed25519`` (if missing) and ``authorized_keys`` from its public half."""
    paths.ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.ssh_dir, 0o700)
    make_keypair(paths.identity, "local-cluster", ClusterError)
    public = paths.identity.with_suffix(".pub").read_text()
    write_atomic(paths.authorized_keys, public, 0o644)
