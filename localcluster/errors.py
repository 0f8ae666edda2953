"""The local cluster's error tree (one module, one base class).

::

    LocalClusterError                 base: the CLI prints ``error: <message>`` and exits 1
    ├── UsageError                    a bad flag, argument or environment variable (exit 2)
    ├── ApiError                      an API request failed; carries an HTTP code and a reason
    │   ├── BadRequest        400     malformed body, bad label/field selector, bad parameter
    │   ├── Unauthorized      401     missing or wrong bearer token
    │   ├── NotFound          404     no such pod or path
    │   ├── MethodNotAllowed  405     verb not supported on the path
    │   ├── Conflict          409     resourceVersion mismatch (reason Conflict)
    │   ├── AlreadyExists     409     a pod of that name exists (reason AlreadyExists)
    │   ├── Expired           410     resourceVersion older than the retained history
    │   ├── UnsupportedMediaType 415  unknown patch content type
    │   ├── Invalid           422     the object breaks a validation rule
    │   ├── Timeout           504     a watch asked for a resourceVersion this server never issued
    │   └── InjectedFault     any     the ``watch_error`` fault's ERROR event (code set per instance)
    ├── KubeletError                  a pod could not be run (sshd, namespaces, addresses)
    │   └── ContainerError            the container engine or image is missing, or it failed
    └── ClusterError                  the cluster as a whole: not running, not root, start failed,
                                      unusable state directory

``ApiError.status()`` renders the Kubernetes ``Status`` object the API server returns.
``shared.runner.run_main`` maps the tree to exit codes (docs/architecture.md,
"Errors and exit codes").
"""
from __future__ import annotations


class LocalClusterError(Exception):
    """Base of every error this package raises on purpose."""


class UsageError(LocalClusterError):
    """A flag, argument or environment variable of ``local-cluster`` is invalid."""


class ApiError(LocalClusterError):
    """An API request failed with HTTP ``code`` and Kubernetes ``reason``."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, name: str | None = None, kind: str = "pods") -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.kind = kind

    def status(self) -> dict:
        """The ``Status`` object (kind Status, apiVersion v1) describing this error."""
        details: dict = {"kind": self.kind}
        if self.name is not None:
            details["name"] = self.name
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        }


class BadRequest(ApiError):
    code, reason = 400, "BadRequest"


class Unauthorized(ApiError):
    code, reason = 401, "Unauthorized"


class NotFound(ApiError):
    code, reason = 404, "NotFound"


class MethodNotAllowed(ApiError):
    code, reason = 405, "MethodNotAllowed"


class Conflict(ApiError):
    code, reason = 409, "Conflict"


class AlreadyExists(ApiError):
    code, reason = 409, "AlreadyExists"


class Expired(ApiError):
    code, reason = 410, "Expired"


class UnsupportedMediaType(ApiError):
    code, reason = 415, "UnsupportedMediaType"


class Invalid(ApiError):
    code, reason = 422, "Invalid"


class Timeout(ApiError):
    code, reason = 504, "Timeout"


class KubeletError(LocalClusterError):
    """A pod could not be run on this machine."""


class ContainerError(KubeletError):
    """The container engine (``--runtime containers``) is missing, lacks the image, or failed."""


class ClusterError(LocalClusterError):
    """The cluster as a whole cannot be started, reached or stopped."""


class InjectedFault(ApiError):
    """The ERROR event of the ``watch_error`` fault: ``code`` is the injected HTTP code."""

    reason = "InternalError"

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
