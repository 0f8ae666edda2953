"""The cluster's SSH key: ``DIR/ssh/id_ed25519`` (made once) and ``authorized_keys`` from it."""
from __future__ import annotations

import os
import subprocess

from .errors import ClusterError
from .statefiles import StatePaths, write_atomic


def ensure_cluster_key(paths: StatePaths) -> None:
    """Create ``DIR/ssh/id_ed25519`` (if missing) and ``authorized_keys`` from its public half."""
    paths.ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.ssh_dir, 0o700)
    if not paths.identity.exists():
        tmp = paths.ssh_dir / ".id_ed25519.tmp"
        for p in (tmp, tmp.with_name(tmp.name + ".pub")):
            if p.exists():
                p.unlink()
        try:
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "local-cluster", "-f", str(tmp)],
                           check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ClusterError(f"ssh-keygen failed to make the cluster key: {exc}") from exc
        os.replace(tmp.with_name(tmp.name + ".pub"), paths.identity.with_suffix(".pub"))
        os.replace(tmp, paths.identity)
    public = paths.identity.with_suffix(".pub").read_text()
    write_atomic(paths.authorized_keys, public, 0o644)
