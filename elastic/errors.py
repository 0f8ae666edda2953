"""The error tree of the ``elastic`` package: every exception class it raises on purpose.

    ElasticError                 base: a command prints ``error: <message>`` (exit codes below)
     ├── ConfigError             bad flag, environment variable or file given by the user (exit 2)
     │    ├── UnsafePath         a path refused by a safety rule (DEST outside the allowed roots, ...)
     │    ├── UnsafeSymlink      SRC contains a symlink that points outside SRC
     │    ├── WorkloadGone       worker-scaler: the workers' workload is being deleted
     │    └── BadEndpoint        a rendezvous port or address that cannot be used
     ├── Interrupted             stopped by a signal (exit 128+N; ``signum`` may be None)
     ├── SSHError                a host could not be reached or verified over SSH (exit 1)
     │    ├── HostKeyMismatch    a pinned host key changed for the same address
     │    └── HostKeyUnverified  ssh refused the host's key: retrying will not help
     ├── SyncError               a dataset could not be copied or verified on a host (exit 1)
     │    ├── DestRefused        the host's DEST cannot be managed
     │    │    └── LockUnavailable  the host cannot give us DEST's lock
     │    ├── LockTimeout        another dataset-sync kept DEST's lock too long
     │    ├── RsyncFailed        rsync exited non-zero
     │    ├── BadManifest        a manifest or a host's listing could not be parsed
     │    └── VerifyFailed       the copy on a host does not match the manifest
     └── LaunchError             horovodrun or the discovery daemon could not be started (exit 1)
          ├── DaemonUnavailable  the discovery daemon did not answer
          │    └── BadAnswer      its answer is not a whole list of host:slots lines
          ├── DaemonStartError   a daemon started by the launcher exited or never became ready
          ├── ToolNotFound       a command the launcher needs is not installed
          ├── TransientError     worker-scaler: an API call that may work when tried again
          ├── BadLease           --leader-election: a Lease read from the API that cannot be trusted
          ├── PlotError          elastic-run --plot: the plot could not be drawn, written or read back
          └── PortTaken          horovodrun: its rendezvous server cannot listen on its fixed port

``shared.runner.run_main`` maps them to exit codes (docs/architecture.md, "Errors and exit
codes"). Library errors are wrapped at the edge with ``raise ... from``.
"""
from __future__ import annotations

import signal

from shared.exitcodes import exit_for_signal


class ElasticError(Exception):
    """Base of every error the ``elastic`` commands report as one line."""


class ConfigError(ElasticError):
    """A flag, environment variable or input file is invalid."""


class SSHError(ElasticError):
    """A host could not be reached, authenticated or verified over SSH."""


class HostKeyMismatch(SSHError):
    """A host presented a key that differs from the one pinned for its address."""


class SyncError(ElasticError):
    """A dataset could not be copied to, or verified on, a host."""


class LaunchError(ElasticError):
    """horovodrun or a helper process (the discovery daemon) could not be started."""


class UnsafePath(ConfigError):
    """A path was refused by a safety rule (DEST outside the allowed roots, shell syntax, ...)."""


class UnsafeSymlink(ConfigError):
    """SRC contains a symlink that points outside SRC."""


class WorkloadGone(ConfigError):
    """worker-scaler: the workers' workload is being deleted, nothing will make workers for
    this Job (exit 2)."""


class Interrupted(ElasticError):
    """Stopped by a signal before the work was done (what was started is stopped).

    ``signum``: the signal (the command exits 128+signum), or None when only a cancel was seen
    (exit 130, as for Ctrl-C).
    """

    def __init__(self, message: str, signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """What the command exits with (``shared.runner.run_main`` reads it): 128 + the signal."""
        return exit_for_signal(self.signum or signal.SIGINT)


class HostKeyUnverified(SSHError):
    """ssh refused the host's key (not pinned, or changed): retrying will not help."""


class DestRefused(SyncError):
    """The host's DEST cannot be managed (exists and is not ours, tools missing, ...)."""


class LockUnavailable(DestRefused):
    """The host cannot give us the lock (no ``flock``, state directory refused): not retried."""


class LockTimeout(SyncError):
    """Another dataset-sync kept DEST's lock on the host for longer than we wait."""


class RsyncFailed(SyncError):
    """rsync exited non-zero (the message has its exit code and last error line)."""


class BadManifest(SyncError):
    """A manifest file or a host's listing could not be parsed."""


class VerifyFailed(SyncError):
    """The copy on a host does not match the manifest."""


class DaemonUnavailable(LaunchError):
    """The discovery daemon did not answer."""


class DaemonStartError(LaunchError):
    """A discovery daemon started by the launcher exited or never became ready."""


class ToolNotFound(LaunchError):
    """A command the launcher needs is not installed."""


class PlotError(LaunchError):
    """``elastic-run --plot``: the plot could not be drawn, written or read back."""


class BadEndpoint(ConfigError):
    """``--rendezvous-port``/``--rendezvous-address``/``--rendezvous-bind`` (or their variables)
    cannot be used."""


class PortTaken(LaunchError):
    """horovodrun's rendezvous server cannot listen on its fixed port (``--rendezvous-port``) or
    bind address (``--rendezvous-bind``)."""


class BadAnswer(DaemonUnavailable):
    """The discovery daemon's answer is not a whole list of ``host:slots`` lines."""


class TransientError(LaunchError):
    """An API call that may work when tried again: no answer, 429, 5xx (worker-scaler retries it)."""


class BadLease(LaunchError):
    """``elastic-run --leader-election``: the Lease read from the API is not one the election can
    trust (the message names the field); the elector treats it as held by someone else."""
