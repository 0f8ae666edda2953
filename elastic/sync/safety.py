"""Safety checks for ``dataset-sync``: where a dataset may be written, and what a source may be.

Pure functions except ``check_source`` (which stats the local file system).  Every refusal
raises ``UnsafePath`` (a ``ConfigError``) with a one-line message naming the path and the rule:

* DEST must be an absolute, normalised POSIX path made of ``A-Z a-z 0-9 . _ + @ % = , - /``
  (nothing a remote shell or rsync could read as syntax or an option), with no component
  starting with ``-`` and no ``.``/``..`` components;
* DEST is never ``/`` and lies strictly inside one of the allowed roots (default ``/data``);
  the root itself is refused too, because DEST becomes a link managed by ``dataset-sync``;
* SRC is an existing local directory.
"""

from __future__ import annotations

import os
import posixpath
import re

from elastic.errors import ConfigError, UnsafePath

DEFAULT_ALLOWED_ROOTS = ("/data",)
_SAFE_CHARS = re.compile(r"[A-Za-z0-9._+@%=,/-]")


def _check_syntax(path: str, what: str) -> None:
    if not path:
        raise UnsafePath(f"{what} is empty")
    if path.startswith("-"):
        raise UnsafePath(f"{what} {path!r} looks like an option")
    for char in path:
        if not _SAFE_CHARS.fullmatch(char):
            raise UnsafePath(f"{what} {path!r} contains {char!r}, which is not allowed in a remote path")
    if not path.startswith("/"):
        raise UnsafePath(f"{what} {path!r} must be an absolute path")
    parts = [p for p in path.split("/") if p]
    for part in parts:
        if part in (".", ".."):
            raise UnsafePath(f"{what} {path!r} must not contain {part!r} components")
        if part.startswith("-"):
            raise UnsafePath(f"{what} {path!r} has a component {part!r} that looks like an option")


def normalize_root(root: str) -> str:
    """Validate one allowed root and return it normalised (no trailing slash)."""
    _check_syntax(root, "allowed root")
    return posixpath.normpath(root) if root != "/" else "/"


def check_dest(dest: str, allowed_roots: tuple[str, ...] | list[str] = DEFAULT_ALLOWED_ROOTS) -> str:
    """Return ``dest`` normalised if it is safe to replace on a host, else raise ``UnsafePath``."""
    _check_syntax(dest, "DEST")
    norm = posixpath.normpath(dest)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    if norm == "/":
        raise UnsafePath("refusing DEST '/': a dataset needs its own directory inside an allowed root")
    roots = [normalize_root(r) for r in allowed_roots]
    if not roots:
        raise UnsafePath("no allowed root is configured")
    for root in roots:
        if norm == root:
            raise UnsafePath(f"refusing DEST {norm!r}: it is an allowed root itself; "
                             f"use a directory inside it, e.g. {root}/mydataset")
        prefix = root if root.endswith("/") else root + "/"
        if norm.startswith(prefix):
            return norm
    raise UnsafePath(f"refusing DEST {norm!r}: it is outside the allowed roots ({', '.join(roots)}); "
                     "see --allowed-root")


def parse_allowed_roots(text: str) -> tuple[str, ...]:
    """Parse ``ELASTIC_SYNC_ALLOWED_ROOTS`` (colon-separated absolute paths)."""
    roots = tuple(normalize_root(r) for r in text.split(":") if r)
    if not roots:
        raise UnsafePath("ELASTIC_SYNC_ALLOWED_ROOTS is empty")
    return roots


def check_source(src: str) -> str:
    """Return SRC as an absolute real path if it is an existing directory, else raise ``ConfigError``."""
    if not src:
        raise ConfigError("SRC is empty")
    path = os.path.realpath(os.path.abspath(src))
    if not os.path.exists(path):
        raise ConfigError(f"missing dataset directory: {src}")
    if not os.path.isdir(path):
        raise ConfigError(f"SRC {src} is not a directory")
    return path
