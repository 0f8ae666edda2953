"""Which host directory a local pod sees as ``/data``: its own, or a node-local ``hostPath``.

``data_source(pod, node_root, pod_dir)`` (pure but for ``mkdir``): when the pod's first
container mounts a volume at ``/data`` and that volume is a ``hostPath`` of type ``""``,
``Directory`` or ``DirectoryOrCreate``, the directory ``node_root/<path>`` -- the "node's" file
system, kept when the pod is gone, shared by every pod that names the same path, as on a real
node (a replaced worker finds what its predecessor left there). Otherwise ``pod_dir/data``,
made fresh and removed with the pod (an ``emptyDir``). ``DirectoryOrCreate`` makes the
directory; the other types want it to exist. A path that is not absolute and normalised
(``..``, ``//``, a trailing ``/``), a NUL byte, another type, a missing ``Directory`` or a
directory that cannot be made (a file in the way) raise
``KubeletError`` with one line (the pod is then reported ``Failed``).
"""
from __future__ import annotations

import posixpath
from pathlib import Path

from .errors import KubeletError

DATA_MOUNT = "/data"
_TYPES = ("", "Directory", "DirectoryOrCreate")


def data_volume(pod: dict) -> dict | None:
    """The volume the pod's first container mounts at ``/data``, or None."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    first = containers[0] if isinstance(containers, list) and containers else {}
    mounts = (first.get("volumeMounts") or []) if isinstance(first, dict) else []
    name = next((m.get("name") for m in mounts if isinstance(m, dict) and m.get("mountPath") == DATA_MOUNT),
                None)
    if name is None:
        return None
    return next((v for v in spec.get("volumes") or [] if isinstance(v, dict) and v.get("name") == name), None)


def host_path(volume: dict | None) -> tuple[str, str] | None:
    """(path, type) of a ``hostPath`` volume, checked; None for any other volume."""
    if not volume or "hostPath" not in volume:
        return None
    source = volume["hostPath"] or {}
    if not isinstance(source, dict):
        raise KubeletError(f"hostPath: a map of path and type, got {type(source).__name__}")
    path, kind = source.get("path"), source.get("type") or ""
    if (not isinstance(path, str) or not path.startswith("/") or "\0" in path or path == "/"
            or posixpath.normpath(path) != path or path.startswith("//")):
        raise KubeletError(f"hostPath {path!r}: not an absolute, normalised directory path")
    if kind not in _TYPES:
        raise KubeletError(f"hostPath {path}: type {kind!r} is not supported (one of {', '.join(map(repr, _TYPES))})")
    return path, kind


def data_source(pod: dict, node_root: Path, pod_dir: Path) -> Path:
    """The host directory bound on the pod's ``/data`` (made when it may be)."""
    found = host_path(data_volume(pod))
    if found is None:
        data = pod_dir / "data"
        _make(data, "the pod's /data")
        return data
    path, kind = found
    target = node_root / path.lstrip("/")
    if kind == "DirectoryOrCreate":
        _make(target, f"hostPath {path}")
    elif not target.is_dir():
        raise KubeletError(f"hostPath {path}: no such directory on the node (type {kind or 'unset'})")
    return target


def _make(directory: Path, what: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KubeletError(f"{what}: cannot make {directory}: {exc.strerror or exc}") from exc
