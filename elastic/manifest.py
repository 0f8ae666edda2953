"""The dataset manifest: every file's size and SHA-256, every symlink and directory of a tree.

``build_manifest(src)`` walks a local directory without following symlinks and returns a
``Manifest``; it refuses (``UnsafeSymlink``) a symlink whose target leaves SRC, lexically or
through other links, and (``ConfigError``) sockets, FIFOs and devices.  The manifest is written
with the data as ``DEST/.dataset-manifest.json`` (``to_json``/``from_json``) and checked against
what a host reports (``parse_listing`` reads the output of ``sync_remote.listing_script``;
``compare`` returns the differences, empty when the copy is exact).  Paths are POSIX, relative
to the tree's root, without a leading ``./``.  The manifest's own file name at the top of SRC is
skipped, so a synced copy can be synced onward.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import stat
from dataclasses import dataclass, field

from elastic.errors import ConfigError, SyncError

MANIFEST_NAME = ".dataset-manifest.json"
FORMAT = "elastic-horovod/dataset-manifest/v1"


class UnsafeSymlink(ConfigError):
    """SRC contains a symlink that points outside SRC."""


class BadManifest(SyncError):
    """A manifest file or a host's listing could not be parsed."""


@dataclass(frozen=True)
class FileEntry:
    """A regular file: size in bytes, hex SHA-256, permission bits, modification time (ns)."""

    size: int
    sha256: str
    mode: int = 0o644
    mtime_ns: int = 0


@dataclass(frozen=True)
class Manifest:
    """An immutable description of a tree (files, symlinks and their targets, directories)."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Sum of the sizes of all regular files."""
        return sum(entry.size for entry in self.files.values())

    @property
    def digest(self) -> str:
        """SHA-256 over the content-relevant fields (paths, sizes, checksums, link targets, dirs)."""
        canonical = json.dumps(
            {
                "files": [[p, e.size, e.sha256] for p, e in sorted(self.files.items())],
                "links": sorted(self.links.items()),
                "dirs": sorted(self.dirs),
            },
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def to_json(self) -> str:
        """Serialise as the JSON document written to ``DEST/.dataset-manifest.json``."""
        doc = {
            "format": FORMAT,
            "digest": self.digest,
            "total_bytes": self.total_bytes,
            "files": {
                p: {"size": e.size, "sha256": e.sha256, "mode": oct(e.mode), "mtime_ns": e.mtime_ns}
                for p, e in sorted(self.files.items())
            },
            "links": dict(sorted(self.links.items())),
            "dirs": sorted(self.dirs),
        }
        return json.dumps(doc, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        """Parse a manifest document; raise ``BadManifest`` if it is not one."""
        try:
            doc = json.loads(text)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format is {doc.get('format')!r}")
            files = {
                p: FileEntry(int(e["size"]), str(e["sha256"]), int(e["mode"], 8), int(e["mtime_ns"]))
                for p, e in doc["files"].items()
            }
            manifest = cls(files, {str(k): str(v) for k, v in doc["links"].items()}, tuple(doc["dirs"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadManifest(f"not a dataset manifest: {exc}") from exc
        if doc.get("digest") != manifest.digest:
            raise BadManifest("manifest digest does not match its content")
        return manifest


def _link_is_inside(src_real: str, rel: str, full: str) -> bool:
    target = os.readlink(full)
    if posixpath.isabs(target):
        return False
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if lexical == ".." or lexical.startswith("../"):
        return False
    real = os.path.realpath(full)
    return real == src_real or real.startswith(src_real + os.sep)


def build_manifest(src: str) -> Manifest:
    """Walk the directory ``src`` and return its manifest (blocks while hashing every file).

    Raises ``UnsafeSymlink`` for a link leaving SRC, ``ConfigError`` for special files or an
    unreadable entry.
    """
    src_real = os.path.realpath(src)
    files: dict[str, FileEntry] = {}
    links: dict[str, str] = {}
    dirs: list[str] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        full_dir = os.path.join(src_real, rel_dir) if rel_dir else src_real
        try:
            entries = sorted(os.scandir(full_dir), key=lambda e: e.name)
        except OSError as exc:
            raise ConfigError(f"cannot read {full_dir}: {exc.strerror}") from exc
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            if rel == MANIFEST_NAME:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    if not _link_is_inside(src_real, rel, entry.path):
                        raise UnsafeSymlink(
                            f"refusing symlink {rel} -> {os.readlink(entry.path)}: it points outside SRC")
                    links[rel] = os.readlink(entry.path)
                elif stat.S_ISDIR(st.st_mode):
                    dirs.append(rel)
                    stack.append(rel)
                elif stat.S_ISREG(st.st_mode):
                    with open(entry.path, "rb") as handle:
                        digest = hashlib.file_digest(handle, "sha256").hexdigest()
                    files[rel] = FileEntry(st.st_size, digest, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
                else:
                    raise ConfigError(f"SRC contains {rel}, which is not a regular file, directory or symlink")
            except OSError as exc:
                raise ConfigError(f"cannot read {entry.path}: {exc.strerror}") from exc
    return Manifest(dict(sorted(files.items())), dict(sorted(links.items())), tuple(sorted(dirs)))


@dataclass(frozen=True)
class Listing:
    """What a host holds: file checksums, symlink targets and directories."""

    files: dict[str, str]
    links: dict[str, str]
    dirs: frozenset[str]


def parse_listing(data: bytes) -> Listing:
    """Parse ``sync_remote.listing_script`` output: NUL-separated ``D``/``L`` records and
    ``sha256sum -z`` lines.  Raises ``BadManifest`` on anything else."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    dirs: set[str] = set()
    tokens = data.split(b"\0")
    if tokens and tokens[-1].strip() == b"":
        tokens.pop()
    i = 0
    try:
        while i < len(tokens):
            token = tokens[i].decode("utf-8", "surrogateescape")
            if token == "D":
                dirs.add(tokens[i + 1].decode("utf-8", "surrogateescape"))
                i += 2
            elif token == "L":
                links[tokens[i + 1].decode("utf-8", "surrogateescape")] = tokens[i + 2].decode("utf-8", "surrogateescape")
                i += 3
            elif len(token) > 66 and token[64:66] == "  ":
                files[token[66:]] = token[:64]
                i += 1
            else:
                raise BadManifest(f"unexpected record in host listing: {token[:80]!r}")
    except IndexError:
        raise BadManifest("truncated host listing") from None
    files.pop(MANIFEST_NAME, None)
    return Listing(files, links, frozenset(dirs))


def compare(manifest: Manifest, listing: Listing) -> list[str]:
    """Return human-readable differences between ``manifest`` and a host's ``listing`` (sorted)."""
    problems = []
    for path, entry in manifest.files.items():
        got = listing.files.get(path)
        if got is None:
            problems.append(f"missing file {path}")
        elif got != entry.sha256:
            problems.append(f"checksum mismatch {path}")
    problems += [f"unexpected file {p}" for p in listing.files if p not in manifest.files]
    for path, target in manifest.links.items():
        got = listing.links.get(path)
        if got is None:
            problems.append(f"missing symlink {path}")
        elif got != target:
            problems.append(f"symlink {path} points to {got}, expected {target}")
    problems += [f"unexpected symlink {p}" for p in listing.links if p not in manifest.links]
    wanted_dirs = set(manifest.dirs)
    problems += [f"missing directory {d}" for d in sorted(wanted_dirs - listing.dirs)]
    problems += [f"unexpected directory {d}" for d in sorted(listing.dirs - wanted_dirs)]
    return sorted(problems)
