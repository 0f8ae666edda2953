"""The layout ``dataset-sync`` keeps on a host, and the shell scripts that read and change it.

Pure string builders and parsers; nothing here runs a command.  For ``DEST=/data/mnist``:

    /data/mnist                      -> .mnist.dataset-sync/v-<id>   (a relative symlink)
    /data/.mnist.dataset-sync/
        lock                         flock(1)ed by the sync working on this DEST (elastic.sync.lock)
        writer                       held open (shared flock) by every remote rsync writing staging
        staging/                     the next version, being copied (kept for resume)
        v-<id>/                      a complete, verified version (+ .dataset-manifest.json)

A reader of DEST sees a complete version: the new one is built in ``staging``, verified, renamed
to ``v-<id>`` and published by renaming a fresh symlink over DEST (``rename(2)`` is atomic).
The previous version is kept (readers that resolved it keep working) and older ones removed.
An interrupted sync leaves DEST untouched and ``staging`` half-filled; the next run reuses it.

No stale writer: a remote rsync runs as a *registered writer* (``writer_rsync_path``: it
holds ``<state>/writer`` open with a shared ``flock`` for as long as it or its children
live). A sync that died (``kill -9``, lost connection) may leave one behind, still writing
into ``staging``. The probe -- run while this run holds the DEST lock, so no live run has a
writer -- kills every process holding ``writer`` open and waits for the exclusive lock on it
(``error=`` if one survives), before anything reads or changes ``staging``; so a copy is
published only when no one else can write into it.

The scripts are POSIX sh using GNU coreutils/findutils/sed (``readlink``, ``mv -T``, ``ln -sfn``,
``find -printf``, ``sha256sum -z``, ``sort -z``, ``sed -z``).  Every path in them was checked
by ``elastic.sync.safety`` and is quoted again with ``shlex.quote``.
"""

from __future__ import annotations

import posixpath
import secrets
import shlex
import time
from dataclasses import dataclass

from elastic.errors import DestRefused, SyncError
from elastic.sync.manifest import HOST_FILES, MANIFEST_NAME

STATE_SUFFIX = ".dataset-sync"
WRITER_NAME = "writer"
STALE_WRITER_WAIT = 30  # seconds for killed stale writers to be gone


@dataclass(frozen=True)
class Layout:
    """Where DEST's versions live on a host (all absolute POSIX paths)."""

    dest: str

    @property
    def parent(self) -> str:
        return posixpath.dirname(self.dest)

    @property
    def name(self) -> str:
        return posixpath.basename(self.dest)

    @property
    def state_name(self) -> str:
        """The state directory's name, also the prefix of the symlink's target."""
        return f".{self.name}{STATE_SUFFIX}"

    @property
    def state(self) -> str:
        return posixpath.join(self.parent, self.state_name)

    @property
    def staging(self) -> str:
        return posixpath.join(self.state, "staging")

    @property
    def link_tmp(self) -> str:
        return posixpath.join(self.parent, f"{self.state_name}.link")

    @property
    def writer(self) -> str:
        return posixpath.join(self.state, WRITER_NAME)


def writer_rsync_path(layout: Layout, remote_rsync: str) -> str:
    """rsync's ``--rsync-path``: the remote rsync, holding ``<state>/writer`` open with a
    shared ``flock`` (fd 8, inherited by the rsync processes) while it runs."""
    w = shlex.quote(layout.writer)
    return f"exec 8>>{w} && flock -s 8 && exec {remote_rsync}"


def end_stale_writers_script(layout: Layout) -> str:
    """Shell lines (part of the probe) that kill every process holding ``<state>/writer``
    open -- rsyncs of a sync that is gone -- and wait until the exclusive lock on it is free;
    ``error=...`` and exit when a writer survives ``STALE_WRITER_WAIT`` seconds."""
    q = shlex.quote
    return f"""
writer={q(layout.writer)}
if [ -e "$writer" ]; then
  for fd in $(find /proc/[0-9]*/fd -lname "$writer" 2>/dev/null); do
    pid=${{fd#/proc/}}; pid=${{pid%%/*}}
    [ "$pid" != "$$" ] && kill -9 "$pid" 2>/dev/null
  done
  exec 7>>"$writer" || {{ echo "error=cannot open $writer"; exit 0; }}
  flock -x -w {STALE_WRITER_WAIT} 7 || {{ echo "error=a stale rsync still writes into $state/staging"; exit 0; }}
  exec 7>&-
fi
"""


def new_version_name(digest: str, now: float | None = None) -> str:
    """Return a fresh version name ``v-<UTC time>-<digest prefix>-<random>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"v-{stamp}-{digest[:12]}-{secrets.token_hex(3)}"


def probe_script(layout: Layout, remote_rsync: str, manifest_digest: str = "", check: str = "quick",
                 check_digest: str = "") -> str:
    """Script printing ``key=value`` lines: ``current`` (version name or empty),
    ``current_digest`` (the digest its manifest file claims), ``unchanged`` (yes when that is
    ``manifest_digest`` and the current copy's listing -- ``check`` ``quick``: sizes and
    mtimes, ``checksum``: SHA-256 -- hashes to ``check_digest``), ``rsync`` (yes/no),
    ``staging`` (empty/partial), ``error`` (a refusal) and ``ok=1`` last.
    It creates the staging directory."""
    q = shlex.quote
    prefix = f"{layout.state_name}/"
    pipeline = _quick_pipeline() if check == "quick" else _listing_pipeline()
    return f"""
dest={q(layout.dest)}; state={q(layout.state)}
if [ -L "$state" ] || {{ [ -e "$state" ] && [ ! -d "$state" ]; }}; then
  echo "error=$state is not a directory"; exit 0
fi
if [ -L "$dest" ]; then
  target=$(readlink -- "$dest")
  case "$target" in
    {q(prefix)}v-*) cur=${{target#{q(prefix)}}}
      if [ -d "$state/$cur" ]; then
        echo "current=$cur"
        digest=$(sed -n 's/^ *"digest": *"\\([0-9a-f]*\\)",*$/\\1/p' "$state/$cur/{MANIFEST_NAME}" 2>/dev/null |
          head -n 1)
        echo "current_digest=$digest"
        if [ -n {q(manifest_digest)} ] && [ "$digest" = {q(manifest_digest)} ]; then
          got=$(cd -- "$state/$cur" && {pipeline} | sha256sum | cut -c1-64)
          if [ "$got" = {q(check_digest)} ]; then echo unchanged=yes; else echo unchanged=no; fi
        fi
      else echo current=; fi ;;
    *) echo "error=$dest is a symlink not managed by dataset-sync (-> $target)"; exit 0 ;;
  esac
elif [ -e "$dest" ]; then
  echo "error=$dest exists and is not managed by dataset-sync; move it away or choose another DEST"; exit 0
else
  echo current=
fi
command -v flock >/dev/null 2>&1 || {{ echo "error=the host has no flock (util-linux)"; exit 0; }}
{end_stale_writers_script(layout)}
mkdir -p -- "$state/staging" || {{ echo "error=cannot create $state/staging"; exit 0; }}
if command -v {q(remote_rsync)} >/dev/null 2>&1; then echo rsync=yes; else echo rsync=no; fi
for tool in sha256sum find xargs readlink sort sed cut; do
  command -v "$tool" >/dev/null 2>&1 || {{ echo "error=the host has no $tool"; exit 0; }}
done
if [ -n "$(ls -A -- "$state/staging")" ]; then echo staging=partial; else echo staging=empty; fi
echo ok=1
"""


@dataclass(frozen=True)
class Probe:
    """What ``probe_script`` found on a host."""

    current: str
    has_rsync: bool
    staging_partial: bool
    current_digest: str = ""
    unchanged: bool = False


def parse_probe(output: str) -> Probe:
    """Parse ``probe_script`` output; raise ``DestRefused`` for a refusal, ``SyncError`` if garbled."""
    values: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    if "error" in values:
        raise DestRefused(values["error"])
    if values.get("ok") != "1":
        raise SyncError(f"unexpected answer from the host: {output.strip()[:200]!r}")
    return Probe(values.get("current", ""), values.get("rsync") == "yes", values.get("staging") == "partial",
                 values.get("current_digest", ""), values.get("unchanged") == "yes")


def not_host_files() -> str:
    """``find`` tests leaving out ``manifest.HOST_FILES`` at the top of the listed tree."""
    return " ".join(f"! -path ./{name}" for name in HOST_FILES)


def _listing_pipeline() -> str:
    """Commands (run inside the directory) printing the sorted listing records."""
    return (
        "{ find . -mindepth 1 -type d -printf 'D %P\\0';"
        " find . -type l -printf 'L %P\\001%l\\0';"
        f" find . -type f {not_host_files()} -printf '%P\\0'"
        " | LC_ALL=C xargs -0r sha256sum -z -- | sed -z 's/^/F /';"
        " } | LC_ALL=C sort -z"
    )


def _quick_pipeline() -> str:
    """Commands (run inside the directory) printing the sorted ``manifest.quick_records``."""
    return (
        "{ find . -mindepth 1 -type d -printf 'D %P\\0';"
        " find . -type l -printf 'L %P\\001%l\\0';"
        f" find . -type f {not_host_files()} -printf 'Q %s %T@ %P\\0'"
        " | sed -z 's/^\\(Q [0-9]* [0-9]*\\)\\.[0-9]* /\\1 /';"
        " } | LC_ALL=C sort -z"
    )


def listing_script(directory: str) -> str:
    """Script printing the listing of ``directory`` (``manifest.parse_listing`` reads it)."""
    return f"cd -- {shlex.quote(directory)} || exit 3\n{_listing_pipeline()}\n"


def seed_staging_script(layout: Layout, current: str) -> str:
    """Script that, when staging is empty and a current version exists, fills staging with
    hard links to it (``cp -al``) so an SFTP copy only sends what changed."""
    q = shlex.quote
    if not current:
        return "true\n"
    return f"""
cd -- {q(layout.state)} || exit 3
if [ -z "$(ls -A -- staging)" ]; then cp -al -- {q(current)}/. staging/ || exit 4; fi
"""


def verify_commit_script(layout: Layout, expected_digest: str, new_version: str, previous: str) -> str:
    """Script that checks staging against the manifest on the host and, if it matches, commits.

    It hashes the sorted listing of staging and compares it with ``expected_digest``
    (``manifest.listing_digest``); on a difference it prints ``verify=mismatch`` and changes
    nothing.  Otherwise it prints ``verify=ok`` and goes on as ``publish_lines`` says."""
    q = shlex.quote
    return f"""
cd -- {q(layout.state)}/staging || exit 3
got=$({_listing_pipeline()} | sha256sum | cut -c1-64)
if [ "$got" != {q(expected_digest)} ]; then echo verify=mismatch; exit 0; fi
echo verify=ok
{publish_lines(layout, new_version, previous)}"""


def publish_lines(layout: Layout, new_version: str, previous: str) -> str:
    """Shell lines, run in staging once it was checked: read the manifest on stdin into
    staging, rename staging to ``new_version``, publish it at DEST with an atomic rename,
    remove versions other than ``new_version`` and ``previous``, print ``committed=<version>``."""
    q = shlex.quote
    target = f"{layout.state_name}/{new_version}"
    keep = q(previous) if previous else "''"
    return f"""set -e
cd ..
cat > staging/{MANIFEST_NAME}.tmp
mv -f -- staging/{MANIFEST_NAME}.tmp staging/{MANIFEST_NAME}
mv -T -- staging {q(new_version)}
ln -sfn -- {q(target)} {q(layout.link_tmp)}
mv -Tf -- {q(layout.link_tmp)} {q(layout.dest)}
for old in v-*; do
  case "$old" in {q(new_version)}|{keep}) ;; *) [ -d "$old" ] && rm -rf -- "$old" ;; esac
done
echo committed={q(new_version)}
"""
