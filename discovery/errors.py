"""The discovery package's error tree (standard library only).

::

    DiscoveryError                  base; the CLIs print ``error: <message>`` and exit 1
    +-- ConfigError                 bad flag, environment variable, kubeconfig or selector (exit 2)
    |   +-- UsageError              discover-hosts: bad flags or environment
    +-- Failure                     discover-hosts: no trustworthy answer from a source
    +-- APIError                    talking to the Kubernetes API failed (``status`` may be None)
    |   +-- APIConnectionError      no HTTP answer: refused, reset, timed out
    |   +-- APIUnauthorizedError    401 / 403
    |   +-- APIBadRequestError      400 / 422: e.g. a bad label selector (not retried)
    |   +-- APIGoneError            410: the resourceVersion is too old; relist
    |   +-- APIServerError          5xx and anything else unexpected
    +-- WatchError                  an ERROR event in a watch stream other than 410
    +-- BadHost                     (also a ValueError) a pod value that must not be served as a host

``api_error_for_status`` picks the class from an HTTP status so adapters raise the
right one ``from`` the library's exception. ``shared.runner.run_main`` maps the tree to
exit codes (docs/architecture.md, "Errors and exit codes"). This module imports nothing:
``discover-hosts`` (standard library only, started every second) imports it.
"""
from __future__ import annotations


class DiscoveryError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(DiscoveryError):
    """A setting is wrong; the message names the setting and the bad value."""


class UsageError(ConfigError):
    """``discover-hosts``: bad flags or environment."""


class Failure(DiscoveryError):
    """``discover-hosts``: no trustworthy answer from one source; the message names the cause."""


class APIError(DiscoveryError):
    """The Kubernetes API call failed."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class APIConnectionError(APIError):
    """No HTTP answer from the API server."""


class APIUnauthorizedError(APIError):
    """The API refused the credentials (401) or the permission (403)."""


class APIBadRequestError(APIError):
    """The API rejected the request itself (400/422), e.g. a malformed selector."""


class APIGoneError(APIError):
    """410 Gone: the requested resourceVersion is no longer in the server's history."""


class APIServerError(APIError):
    """Any other non-success status."""


class WatchError(DiscoveryError):
    """The watch stream carried an ERROR event other than 410."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def api_error_for_status(status: int | None, message: str) -> APIError:
    """Return the ``APIError`` subclass instance that matches an HTTP ``status``."""
    if status is None or status == 0:
        return APIConnectionError(message, status)
    if status in (401, 403):
        return APIUnauthorizedError(message, status)
    if status in (400, 422):
        return APIBadRequestError(message, status)
    if status == 410:
        return APIGoneError(message, status)
    return APIServerError(message, status)


class BadHost(DiscoveryError, ValueError):
    """A value that must not be served as a host; the message says why (no value in it)."""
