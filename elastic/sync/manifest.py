"""The dataset manifest: every file's size and SHA-256, every symlink and directory of a tree.

``build_manifest(src, symlinks=...)`` walks a local directory and returns a ``Manifest`` of
what lands on a host.  Symlinks follow rsync's meanings (``SYMLINK_MODES``):

* ``refuse`` (the default): a symlink inside SRC is kept as a link; one whose target leaves
  SRC, lexically or through other links, is refused (``UnsafeSymlink``);
* ``copy-unsafe`` (rsync ``--copy-unsafe-links``): a link that is absolute or climbs out of
  SRC lexically is replaced by its target's content -- a file entry, or a directory walked in
  turn -- and the others are kept as links (they resolve inside DEST on the host); a target
  that is missing or a loop of such links is refused;
* ``keep`` (rsync ``--links``): every symlink is kept as a link, its target as written.

In no mode does a host write through a link: rsync and the SFTP fallback create links, never
follow them on the host.  Sockets, FIFOs and devices are refused (``ConfigError``).  The manifest is written
with the data as ``DEST/.dataset-manifest.json`` (``to_json``/``from_json``) and checked against
what a host reports: ``listing_digest`` is the hash a host's listing must have (checked on the
host by ``elastic.sync.remote.verify_commit_script``); ``parse_listing`` reads a full listing
(``elastic.sync.remote.listing_script``) and ``compare`` returns the differences, empty when
exact.  Paths are POSIX, relative to the tree's root, without a leading ``./``.  The names in
``HOST_FILES`` at the top of SRC are skipped (the manifest's own, so a synced copy can be
synced onward, and the training jobs' scan cache, which a host writes into its copy on first
use): they are neither copied nor verified.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import stat
from dataclasses import dataclass, field
from functools import cached_property

from elastic.errors import BadManifest, ConfigError, UnsafeSymlink
from shared.environment import XDG_CACHE_HOME

MANIFEST_NAME = ".dataset-manifest.json"
TRAINING_SCAN_NAME = ".training-scan.json"  # training/imagefolder.py CACHE_NAME (no import: layering)
HOST_FILES = (MANIFEST_NAME, TRAINING_SCAN_NAME)
"""Files at the top of a copy that are not data: skipped by the manifest, rsync and listings."""
SYMLINK_MODES = ("refuse", "copy-unsafe", "keep")
FORMAT = "elastic-horovod/dataset-manifest/v1"
_READ_CHUNK = 1 << 20


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's content, read in 1 MiB chunks (``hashlib.file_digest`` is 3.11+)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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

    @cached_property
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
    def from_json(cls, text: str) -> Manifest:
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


def _lexically_inside(rel: str, target: str) -> bool:
    """rsync's notion of a safe link: relative, and not climbing out of the tree's root."""
    if posixpath.isabs(target):
        return False
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return not (lexical == ".." or lexical.startswith("../"))


def _link_is_inside(src_real: str, rel: str, full: str) -> bool:
    if not _lexically_inside(rel, os.readlink(full)):
        return False
    real = os.path.realpath(full)
    return real == src_real or real.startswith(src_real + os.sep)


RESERVED_SUFFIX = ".dataset-sync-tmp"  # the SFTP fallback's upload names: .NAME.dataset-sync-tmp


def _check_reserved(rel: str) -> None:
    """Refuse names the host side writes itself (the manifest's temporary file, the SFTP
    fallback's upload names): a link there would be written through, outside DEST."""
    if rel == MANIFEST_NAME + ".tmp" or rel.endswith(RESERVED_SUFFIX):
        raise ConfigError(f"refusing {rel}: dataset-sync writes that name on the hosts itself; rename it in SRC")


def _check_name(rel: str) -> None:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raw = rel.encode("utf-8", "surrogateescape")
        raise ConfigError(f"SRC contains a name that is not UTF-8: {raw!r}") from None
    if "\x01" in rel or "\0" in rel:
        raise ConfigError(f"SRC contains a name with a control character: {rel!r}")


def _copied_target(rel: str, path: str, target: str) -> os.stat_result:
    """The stat of what ``copy-unsafe`` copies in place of the link ``rel`` (its target's);
    raises ``UnsafeSymlink`` when there is none."""
    try:
        return os.stat(path)
    except OSError as exc:
        raise UnsafeSymlink(f"refusing symlink {rel} -> {target}: its target cannot be copied "
                            f"({exc.strerror or exc})") from exc


HashCache = dict[str, tuple[int, int, int, int, str]]
"""rel path -> (size, mtime_ns, ctime_ns, inode, sha256): checksums of files seen before."""


def build_manifest(src: str, cache: HashCache | None = None, symlinks: str = "refuse") -> Manifest:
    """Walk the directory ``src`` and return its manifest (blocks while hashing every file).

    ``symlinks`` is one of ``SYMLINK_MODES`` (see the module docstring).  With ``cache``, a
    file whose size, mtime, ctime and inode are those recorded is not read again (any write
    changes its ctime); the cache is updated in place for every file.  Raises
    ``UnsafeSymlink`` for a link leaving SRC (``refuse``) or one that cannot be copied
    (``copy-unsafe``: missing target, loop), ``ConfigError`` for special files, an unreadable
    entry or an unknown mode.
    """
    if symlinks not in SYMLINK_MODES:
        raise ConfigError(f"--symlinks must be one of {', '.join(SYMLINK_MODES)}, got {symlinks!r}")
    src_real = os.path.realpath(src)
    seen: HashCache = {}
    files: dict[str, FileEntry] = {}
    links: dict[str, str] = {}
    dirs: list[str] = []
    # (rel path, real path, real paths of the directories above it): a directory met again
    # below itself (through a copied link) is a loop
    stack: list[tuple[str, str, frozenset[str]]] = [("", src_real, frozenset())]
    while stack:
        rel_dir, real_dir, above = stack.pop()
        above = above | {real_dir}
        full_dir = os.path.join(src_real, rel_dir) if rel_dir else src_real
        try:
            entries = sorted(os.scandir(full_dir), key=lambda e: e.name)
        except OSError as exc:
            raise ConfigError(f"cannot read {full_dir}: {exc.strerror}") from exc
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            if rel in HOST_FILES:
                continue
            _check_name(rel)
            _check_reserved(rel)
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    target = os.readlink(entry.path)
                    if symlinks == "copy-unsafe" and not _lexically_inside(rel, target):
                        st = _copied_target(rel, entry.path, target)
                    elif symlinks == "refuse" and not _link_is_inside(src_real, rel, entry.path):
                        raise UnsafeSymlink(
                            f"refusing symlink {rel} -> {target}: it points outside SRC "
                            "(--symlinks copy-unsafe copies its target, --symlinks keep keeps the link)")
                    else:
                        _check_name(target)
                        links[rel] = target
                        continue
                if stat.S_ISDIR(st.st_mode):
                    real = os.path.realpath(entry.path) if entry.is_symlink() else os.path.join(real_dir, entry.name)
                    if real in above:
                        raise UnsafeSymlink(f"refusing {rel}: it is {real}, a directory it is inside of "
                                            "(a symlink loop; copy-unsafe cannot copy it)")
                    dirs.append(rel)
                    stack.append((rel, real, above))
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                    known = cache.get(rel) if cache is not None else None
                    if known is not None and tuple(known[:4]) == key:
                        digest = known[4]
                    else:
                        digest = file_sha256(entry.path)
                    seen[rel] = (*key, digest)
                    files[rel] = FileEntry(st.st_size, digest, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
                else:
                    raise ConfigError(f"SRC contains {rel}, which is not a regular file, directory or symlink")
            except OSError as exc:
                raise ConfigError(f"cannot read {entry.path}: {exc.strerror}") from exc
    if cache is not None:
        cache.clear()
        cache.update(seen)
    return Manifest(dict(sorted(files.items())), dict(sorted(links.items())), tuple(sorted(dirs)))


def cached_manifest(src_real: str, symlinks: str = "refuse", cache_dir: str | None = None) -> tuple[Manifest, int]:
    """``build_manifest`` of ``src_real`` through its hash cache (``cache_path``), which is
    written back when anything changed: (the manifest, how many files were hashed: new or
    changed since the cache recorded them). Raises as ``build_manifest``."""
    path = cache_path(src_real, cache_dir)
    cache = load_cache(path, src_real)
    before = dict(cache)
    manifest = build_manifest(src_real, cache, symlinks)
    if cache != before:
        save_cache(path, src_real, cache)
    return manifest, sum(1 for rel, entry in cache.items() if before.get(rel) != entry)


def cache_path(src_real: str, cache_dir: str | None = None) -> str:
    """Where the hash cache of SRC lives (``$XDG_CACHE_HOME/elastic-horovod/dataset-sync``)."""
    base = cache_dir or os.path.join(os.environ.get(XDG_CACHE_HOME) or os.path.expanduser("~/.cache"),
                                     "elastic-horovod", "dataset-sync")
    return os.path.join(base, hashlib.sha256(src_real.encode()).hexdigest()[:32] + ".json")


def load_cache(path: str, src_real: str) -> HashCache:
    """Read a hash cache; an unreadable or foreign one is an empty cache (never an error)."""
    try:
        with open(path) as handle:
            doc = json.load(handle)
        if doc.get("src") != src_real:
            return {}
        return {str(k): tuple(v) for k, v in doc["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def save_cache(path: str, src_real: str, cache: HashCache) -> None:
    """Write a hash cache atomically; failures are ignored (the cache is only an optimisation)."""
    from shared.atomicfile import write_atomic

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, json.dumps({"src": src_real, "files": cache}, separators=(",", ":")), 0o600)
    except OSError:
        pass


@dataclass(frozen=True)
class Listing:
    """What a host holds: file checksums, symlink targets and directories."""

    files: dict[str, str]
    links: dict[str, str]
    dirs: frozenset[str]


def listing_records(manifest: Manifest) -> list[bytes]:
    """The manifest as the sorted records a host's listing must produce (see ``parse_listing``)."""
    records = [b"D " + d.encode() for d in manifest.dirs]
    records += [b"L " + p.encode() + b"\x01" + t.encode() for p, t in manifest.links.items()]
    records += [b"F " + e.sha256.encode() + b"  " + p.encode() for p, e in manifest.files.items()]
    return sorted(records)


def listing_digest(manifest: Manifest) -> str:
    """SHA-256 of the sorted, NUL-terminated records: what ``elastic.sync.remote`` compares on the host."""
    return hashlib.sha256(b"".join(r + b"\0" for r in listing_records(manifest))).hexdigest()


def quick_records(manifest: Manifest) -> list[bytes]:
    """Like ``listing_records`` with ``Q size mtime-seconds path`` instead of checksums (the
    cheap check of a copy that was verified when it was made)."""
    records = [b"D " + d.encode() for d in manifest.dirs]
    records += [b"L " + p.encode() + b"\x01" + t.encode() for p, t in manifest.links.items()]
    records += [f"Q {e.size} {e.mtime_ns // 10**9} ".encode() + p.encode() for p, e in manifest.files.items()]
    return sorted(records)


def quick_digest(manifest: Manifest) -> str:
    """SHA-256 of the sorted, NUL-terminated ``quick_records``."""
    return hashlib.sha256(b"".join(r + b"\0" for r in quick_records(manifest))).hexdigest()


def parse_listing(data: bytes) -> Listing:
    """Parse a host's listing: NUL-terminated records ``D path``, ``L path\\x01target`` and
    ``F sha256  path``.  Raises ``BadManifest`` on anything else."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    dirs: set[str] = set()
    for raw in data.split(b"\0"):
        if not raw.strip():
            continue
        try:
            record = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadManifest(f"host listing has a name that is not UTF-8: {raw[:80]!r}") from None
        kind, body = record[:2], record[2:]
        if kind == "D ":
            dirs.add(body)
        elif kind == "L " and "\x01" in body:
            path, target = body.split("\x01", 1)
            links[path] = target
        elif kind == "F " and len(body) > 66 and body[64:66] == "  ":
            files[body[66:]] = body[:64]
        else:
            raise BadManifest(f"unexpected record in host listing: {record[:80]!r}")
    for name in HOST_FILES:
        files.pop(name, None)
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
