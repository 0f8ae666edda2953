"""Read a host's SSH host key over the network with paramiko (no authentication, no shell).

``fetch_host_key(host, port, timeout, key_types)`` blocks for one key exchange and returns
``(key_type, key_base64)``; with ``key_types`` the host must present one of those types
(used to re-check a pinned type).  Raises ``SSHError`` naming the host and the cause
(refused, timed out, not an SSH server, no acceptable key type).
"""

from __future__ import annotations

import logging
import socket

import paramiko

from elastic.errors import SSHError

logging.getLogger("paramiko").addHandler(logging.NullHandler())


def fetch_host_key(host: str, port: int, timeout: float = 10.0,
                   key_types: tuple[str, ...] | None = None) -> tuple[str, str]:
    """Return the host key ``host:port`` presents as ``(type, base64)``."""
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError as exc:
        raise SSHError(f"{where}: connection timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise SSHError(f"{where}: {exc.strerror or exc}") from exc
    transport = paramiko.Transport(sock)
    try:
        if key_types:
            supported = [k for k in key_types if k in transport.get_security_options().key_types]
            if not supported:
                raise SSHError(f"{where}: pinned key type {', '.join(key_types)} is not supported by paramiko")
            transport.get_security_options().key_types = supported
        transport.banner_timeout = timeout
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return key.get_name(), key.get_base64()
    except paramiko.SSHException as exc:
        raise SSHError(f"{where}: SSH handshake failed: {exc}") from exc
    except OSError as exc:
        raise SSHError(f"{where}: {exc.strerror or exc}") from exc
    except EOFError as exc:
        raise SSHError(f"{where}: connection closed during the SSH handshake") from exc
    finally:
        transport.close()
        sock.close()
