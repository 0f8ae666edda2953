"""Replace a file atomically: the project's one atomic writer (standard library only, cheap
to import).

``write_atomic(path, data, mode=0o644, parents=False)`` writes ``data`` (bytes, or text as
UTF-8); ``with replacing(path, mode=0o644, parents=False, prefix=".") as f:`` gives a binary
file to stream the new content into (``torch.save`` into it, say). Either way the content goes
to a new temporary file beside ``path`` (named ``PREFIX<name>.<pid>.<random>.tmp``; created
with mode 0600, then given ``mode`` before the rename, so a private key never exists with a
looser mode than asked), is fsynced and renamed over ``path``: a reader sees the old file or
the new one, never a partial one. ``parents`` creates missing parent directories first.
Blocks until the data is on disk; raises ``OSError``, or what the ``with`` body raised, and
then the temporary file is removed and ``path`` is untouched. No ``tempfile`` (it imports
``random`` and more): ``discover-hosts`` imports this and starts every second.
"""
from __future__ import annotations

import os
from typing import BinaryIO


class replacing:  # noqa: N801 - used as a function: ``with replacing(path) as f``
    """See the module docstring."""

    def __init__(self, path: str | os.PathLike[str], mode: int = 0o644, *, parents: bool = False,
                 prefix: str = ".") -> None:
        self._path = os.fspath(path)
        directory, name = os.path.split(os.path.abspath(self._path))
        self._directory, self._mode, self._parents = directory, mode, parents
        self._tmp = os.path.join(directory, f"{prefix}{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        self._file: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        if self._parents:
            os.makedirs(self._directory, exist_ok=True)
        fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, self._mode)
            self._file = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self._remove()
            raise
        return self._file

    def __exit__(self, kind: object, value: object, trace: object) -> None:
        assert self._file is not None
        try:
            try:
                if kind is None:
                    self._file.flush()
                    os.fsync(self._file.fileno())
            finally:
                self._file.close()
            if kind is None:
                os.replace(self._tmp, self._path)
                return
        except BaseException:
            self._remove()
            raise
        self._remove()

    def _remove(self) -> None:
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644, *,
                 parents: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    with replacing(path, mode, parents=parents) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
