"""The error tree of the ``elastic`` package.

    ElasticError                 base: a command prints ``error: <message>`` and exits non-zero
     ├── ConfigError             bad flag, environment variable or file given by the user
     ├── SSHError                a host could not be reached or verified over SSH
     │    └── HostKeyMismatch    a pinned host key changed for the same address
     ├── SyncError               a dataset could not be copied or verified on a host
     └── LaunchError             horovodrun or the discovery daemon could not be started

Modules may add subclasses of these; library errors are wrapped at the edge with ``raise ... from``.
"""


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
