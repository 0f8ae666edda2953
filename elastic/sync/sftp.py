"""The SFTP fallback of ``dataset-sync`` (paramiko), for hosts without rsync.

``plan_changes(manifest, listing)`` (pure) compares the wanted tree with what the staging
directory holds and returns the operations: remove extras (deepest first), create
directories (shallowest first), create symlinks, upload files whose checksum differs.
``sftp_copy`` connects with the settings ssh_config gives for the host (HostName, Port, User,
IdentityFile, UserKnownHostsFile; unknown or changed host keys are rejected), applies the plan
inside staging and returns (files, bytes) uploaded.  Each file is uploaded to a temporary
name and renamed into place, so a hard link shared with the previous version is replaced,
never overwritten.  Raises ``SSHError`` (connect/auth/host key) or ``SyncError`` (I/O).
"""

from __future__ import annotations

import getpass
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from elastic.errors import HostKeyUnverified, Interrupted, SSHError, SyncError
from elastic.sync.cancel import CancelToken
from elastic.sync.manifest import Listing, Manifest


@dataclass(frozen=True)
class Plan:
    """Operations turning the staging directory into the manifest's tree."""

    remove_files: tuple[str, ...]
    remove_dirs: tuple[str, ...]
    make_dirs: tuple[str, ...]
    make_links: tuple[tuple[str, str], ...]
    upload: tuple[str, ...]


def _depth(path: str) -> int:
    return path.count("/")


def plan_changes(manifest: Manifest, listing: Listing) -> Plan:
    """Return the ``Plan`` (pure)."""
    remove_files = [p for p in listing.files if p not in manifest.files]
    remove_files += [p for p, t in listing.links.items() if manifest.links.get(p) != t]
    wanted_dirs = set(manifest.dirs)
    remove_dirs = sorted((d for d in listing.dirs if d not in wanted_dirs), key=lambda d: (-_depth(d), d))
    make_dirs = sorted((d for d in wanted_dirs if d not in listing.dirs), key=lambda d: (_depth(d), d))
    make_links = [(p, t) for p, t in manifest.links.items() if listing.links.get(p) != t]
    upload = [p for p, e in manifest.files.items() if listing.files.get(p) != e.sha256]
    return Plan(tuple(sorted(remove_files)), tuple(remove_dirs), tuple(make_dirs), tuple(sorted(make_links)),
                tuple(sorted(upload)))


def connect(host: str, ssh_config: str | None, timeout: float = 10.0) -> paramiko.SSHClient:
    """An authenticated paramiko client for ``host`` as ssh_config describes it."""
    config = paramiko.SSHConfig()
    path = ssh_config or os.path.expanduser("~/.ssh/config")
    if os.path.exists(path):
        try:
            config = paramiko.SSHConfig.from_path(path)
        except (OSError, paramiko.ConfigParseError) as exc:
            raise SSHError(f"cannot read ssh_config {path}: {exc}") from exc
    options = config.lookup(host)
    client = paramiko.SSHClient()
    known = options.get("userknownhostsfile", "~/.ssh/known_hosts").split()
    for name in known:
        name = os.path.expanduser(name)
        if os.path.exists(name):
            client.load_host_keys(name)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    key_files = [os.path.expanduser(k) for k in options.get("identityfile", [])] or None
    try:
        client.connect(
            options.get("hostname", host), port=int(options.get("port", 22)),
            username=options.get("user", getpass.getuser()),
            # paramiko documents "the filename, or list of filenames"; types-paramiko has str only
            key_filename=key_files,  # type: ignore[arg-type]
            look_for_keys="identityfile" not in options, allow_agent=False, timeout=timeout,
            banner_timeout=timeout, auth_timeout=timeout)
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyUnverified(f"{host}: host key changed (SFTP refused it)") from exc
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            raise HostKeyUnverified(f"{host}: host key not pinned (run ssh-bootstrap hosts)") from exc
        raise SSHError(f"{host}: SFTP connection failed: {exc}") from exc
    except OSError as exc:
        client.close()
        raise SSHError(f"{host}: {exc.strerror or exc}") from exc
    return client


def sftp_copy(host: str, ssh_config: str | None, src: str, staging: str, manifest: Manifest, listing: Listing,
              on_progress: Callable[[int, int], None], cancel: CancelToken, timeout: float = 10.0) -> tuple[int, int]:
    """Apply ``plan_changes`` to ``staging`` on ``host``; return (files, bytes) uploaded; blocks.

    ``on_progress(files_done, bytes_done)`` is called after each file and chunk."""
    plan = plan_changes(manifest, listing)
    client = connect(host, ssh_config, timeout)
    files_done = bytes_done = 0
    try:
        sftp = client.open_sftp()
        channel = sftp.get_channel()
        assert channel is not None  # open_sftp() builds the client on a channel
        channel.settimeout(max(60.0, timeout))
        remote = lambda rel: posixpath.join(staging, rel)  # noqa: E731
        for rel in plan.remove_files:
            sftp.remove(remote(rel))
        for rel in plan.remove_dirs:
            sftp.rmdir(remote(rel))
        for rel in plan.make_dirs:
            sftp.mkdir(remote(rel))
        for rel, target in plan.make_links:
            sftp.symlink(target, remote(rel))
        for rel in plan.upload:
            if cancel.cancelled:
                raise Interrupted(f"{host}: interrupted")
            entry = manifest.files[rel]
            final = remote(rel)
            tmp = posixpath.join(posixpath.dirname(final), f".{posixpath.basename(final)}.dataset-sync-tmp")
            base = bytes_done

            def chunk(sent: int, _total: int, base: int = base, files_done: int = files_done) -> None:
                on_progress(files_done, base + sent)

            with open(os.path.join(src, rel), "rb") as handle:
                sftp.putfo(handle, tmp, file_size=entry.size, callback=chunk, confirm=True)
            sftp.chmod(tmp, entry.mode)
            mtime = entry.mtime_ns / 1e9
            sftp.utime(tmp, (mtime, mtime))
            sftp.posix_rename(tmp, final)
            files_done += 1
            bytes_done += entry.size
            on_progress(files_done, bytes_done)
        sftp.close()
    except (OSError, paramiko.SSHException) as exc:
        raise SyncError(f"{host}: SFTP copy failed: {exc}") from exc
    finally:
        client.close()
    return files_done, bytes_done
