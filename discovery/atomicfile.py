"""Replace a file atomically (standard library only, cheap to import).

``write_atomic(path, data, mode=0o644)`` writes ``data`` (bytes, or text as UTF-8) to a new
temporary file beside ``path``, fsyncs it, gives it ``mode`` and renames it over ``path``:
a reader sees the old file or the new one, never a partial one. Blocks until the data is on
disk; raises ``OSError`` (the temporary file is removed).

This is discovery's one copy. The packages ship alone (discovery in the daemon image, without
``elastic`` or ``localcluster``), so each has its own; this one avoids ``tempfile`` (which
imports ``random`` and more) because ``discover-hosts`` imports it and starts every second.
"""
from __future__ import annotations

import os


def write_atomic(path: str, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory, name = os.path.split(os.path.abspath(path))
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
