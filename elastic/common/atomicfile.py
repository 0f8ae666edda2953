"""Write files so that readers see the old content or the new content, never a half-written file.

``write_atomic(path, data, mode)`` writes to a temporary file in the same directory, fsyncs it,
sets its mode and renames it over ``path``.  It blocks until the data is on disk and raises
``OSError`` on failure (the temporary file is removed).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``data`` atomically; return the path.

    Text is encoded as UTF-8.  ``mode`` is applied before the rename, so a private key never
    exists with a looser mode than requested.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target
