"""Replace a file atomically: the project's one atomic writer (standard library only, cheap
to import).

``write_atomic(path, data, mode=0o644, parents=False)`` writes ``data`` (bytes, or text as
UTF-8) to a new temporary file beside ``path`` (created with mode 0600, then given ``mode``
before the rename, so a private key never exists with a looser mode than asked), fsyncs it
and renames it over ``path``: a reader sees the old file or the new one, never a partial
one. ``parents`` creates missing parent directories first. Blocks until the data is on disk;
raises ``OSError`` (the temporary file is removed). No ``tempfile`` (it imports ``random``
and more): ``discover-hosts`` imports this and starts every second.
"""
from __future__ import annotations

import os


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644, *,
                 parents: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    if parents:
        os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
