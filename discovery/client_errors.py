"""The errors of the ``discover-hosts`` client (standard library only, imports nothing).

    ClientError        base of the client's errors
      Failure          no trustworthy answer from one source; the message names the cause (exit 1)
      UsageError       bad flags or environment (exit 2)

Kept apart from ``discovery.errors`` (the daemon's tree, which imports nothing heavy either
but is not needed by the client) so that ``discover_hosts`` and ``discover_api`` both import
them without importing each other.
"""


class ClientError(Exception):
    """Base of the ``discover-hosts`` client's errors."""


class Failure(ClientError):
    """No trustworthy answer from one source; the message names the cause."""


class UsageError(ClientError):
    """Bad flags or environment."""
