"""shared.atomicfile: the one atomic writer. A reader sees the old file or the new one; a
failed write leaves the old file and no temporary file; the mode is set before the rename."""
from __future__ import annotations

import os
import stat

import pytest

from shared.atomicfile import replacing, write_atomic


def test_write_atomic_replaces_the_file_with_the_mode_asked(tmp_path):
    path = tmp_path / "key"
    path.write_text("old")
    write_atomic(path, "new", 0o600)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["key"]


def test_parents_are_made_when_asked(tmp_path):
    write_atomic(tmp_path / "a" / "b" / "f", b"x", parents=True)
    assert (tmp_path / "a" / "b" / "f").read_bytes() == b"x"
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "c" / "f", b"x")


def test_a_stream_is_renamed_into_place_only_when_the_block_ends(tmp_path):
    path = tmp_path / "ckpt"
    path.write_bytes(b"old")
    with replacing(path, prefix=".ckpt-") as f:
        f.write(b"new ")
        [tmp] = [n for n in os.listdir(tmp_path) if n != "ckpt"]
        assert tmp.startswith(".ckpt-ckpt.") and tmp.endswith(".tmp")
        assert path.read_bytes() == b"old"  # a reader still sees the old file
        f.write(b"content")
    assert path.read_bytes() == b"new content" and sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "ckpt"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="serializer failed"):
        with replacing(path) as f:
            f.write(b"half")
            raise RuntimeError("serializer failed")
    assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["ckpt"]
