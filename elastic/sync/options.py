"""``SyncOptions``: the settings of one ``dataset-sync`` run, checked where they are made.

Shared by the parallel path (``elastic.sync.service``), the relay (``elastic.sync.relay_run``)
and the per-host engine (``elastic.sync.hostsync``); ``rsync`` hands the rsync transport its
own settings (``elastic.sync.rsync.RsyncOptions``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from elastic.errors import ConfigError
from elastic.sync.retry import RetryPolicy
from elastic.sync.rsync import RsyncOptions
from elastic.sync.safety import DEFAULT_ALLOWED_ROOTS
from elastic.sync.transport import TRANSPORTS


@dataclass(frozen=True)
class SyncOptions:
    """How to sync; checked in ``__post_init__`` (``ConfigError`` names the bad value).
    ``chunk_mib``: the smallest chunk of ``--relay pipeline`` (``elastic.sync.pipeline``)."""

    ssh_config: str | None = None
    jobs: int = 8
    allowed_roots: tuple[str, ...] = DEFAULT_ALLOWED_ROOTS
    transport: str = "auto"
    remote_rsync: str = "rsync"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    bwlimit_kbps: int | None = None
    connect_timeout: int = 10
    command_timeout: float = 600.0
    verify_unchanged: str = "quick"
    hash_cache: bool = True
    cache_dir: str | None = None
    lock_timeout: float = 600.0
    symlinks: str = "refuse"
    chunk_mib: float = 8.0

    def __post_init__(self) -> None:
        self.rsync  # noqa: B018 - builds RsyncOptions, which checks --symlinks, --remote-rsync, --bwlimit
        if self.jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {self.jobs}")
        if self.transport not in TRANSPORTS:
            raise ConfigError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.verify_unchanged not in ("quick", "checksum"):
            raise ConfigError(f"--verify-unchanged must be quick or checksum, got {self.verify_unchanged!r}")
        if not 0 < self.chunk_mib < 2**20:
            raise ConfigError(f"--chunk-mib must be > 0, got {self.chunk_mib:g}")
        if not 0 <= self.lock_timeout < 10**7:
            raise ConfigError(f"--lock-timeout must be >= 0 seconds, got {self.lock_timeout}")

    @property
    def rsync(self) -> RsyncOptions:
        """The rsync transport's settings (``ConfigError`` for a bad one)."""
        return RsyncOptions(self.remote_rsync, self.bwlimit_kbps, self.symlinks)
