"""The one client of the discovery daemon's HTTP protocol. Standard library only, and lean:
``discover-hosts`` runs it once a second, so it imports nothing but the C ``_socket`` module
and ``time`` (no ``socket``, ``urllib``, ``http.client``: each costs start-up time).

URLs (``DISCOVERY_URL``): ``http://HOST[:PORT][/prefix]`` or ``unix:/path/to.sock``
(also ``unix:///path``); ``split_url`` -> ``(family, address, prefix)``, ``BadURL`` (a
``ValueError``) for anything else. The bearer token (``DISCOVERY_TOKEN``, the daemon's
``--token``) goes in ``Authorization: Bearer``.

``get(url, path, token=None, timeout=...)`` sends one ``GET`` (HTTP/1.0: one request, the
connection closed by the daemon after the answer) and returns ``(status, headers, body)``,
headers lower-cased. ``timeout`` bounds the whole exchange (connect, send, every read): a
daemon that answers one byte a second is cut off when it runs out, not reset by each byte.
Every failure to get a whole answer is ``Unanswered`` (an ``OSError``: unreachable, no
complete answer in time -- ``timed_out`` --, larger than ``max_body``, malformed, or shorter
than its ``Content-Length``), its message naming the daemon. A status other than 200 is an
answer, not an error: the caller decides. Connecting to an IP literal skips the resolver.
"""
from __future__ import annotations

import _socket  # the C module: ``socket`` would pull in ``enum`` and more (start-up time)
import time

from shared.environment import DISCOVERY_TOKEN, DISCOVERY_URL

URL_ENV = DISCOVERY_URL
TOKEN_ENV = DISCOVERY_TOKEN
MAX_BODY = 16 << 20  # bytes of an answer read at most


class BadURL(ValueError):
    """A URL this client does not speak (the message names it)."""


class Unanswered(OSError):
    """No whole answer from the daemon (see the module docstring)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def split_url(url: str) -> tuple[str, str | tuple[str, int], str]:
    """``URL`` -> ``("tcp", (host, port), prefix)`` or ``("unix", path, "")``; ``BadURL``."""
    if url.startswith("unix:"):
        path = url[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise BadURL(f"bad DISCOVERY_URL {url!r}: no socket path")
        return "unix", path, ""
    if not url.startswith("http://"):
        raise BadURL(f"bad DISCOVERY_URL {url!r}: want http://HOST:PORT or unix:/path")
    rest = url[7:]
    hostport, slash, prefix = rest.partition("/")
    prefix = ("/" + prefix).rstrip("/") if slash else ""
    if hostport.startswith("["):
        host, _, port = hostport[1:].partition("]")
        port = port[1:] if port.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    try:
        port_n = int(port or 80)
    except ValueError:
        raise BadURL(f"bad DISCOVERY_URL {url!r}: port {port!r}") from None
    if not host:
        raise BadURL(f"bad DISCOVERY_URL {url!r}: no host")
    if not 0 < port_n < 65536:
        raise BadURL(f"bad DISCOVERY_URL {url!r}: port {port_n} out of range")
    return "tcp", (host, port_n), prefix


def _connect(address: tuple[str, int], timeout: float) -> _socket.socket:
    """``socket.create_connection`` without importing ``socket``: try each address in turn."""
    host, port = address
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, host)
        except OSError:
            continue
        # an IP literal: connect directly; getaddrinfo would load the resolver (~20 ms of CPU)
        sock = _socket.socket(family, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            raise
        return sock
    error: OSError = OSError("no address")
    for family, kind, proto, _, sockaddr in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
            return sock
        except OSError as e:
            sock.close()
            error = e
    raise error


def get(url: str, path: str, token: str | None = None, timeout: float = 5.0,
        max_body: int = MAX_BODY) -> tuple[int, dict[str, str], bytes]:
    """One ``GET {prefix}{path}`` -> ``(status, headers lower-cased, body)``; see the module
    docstring (``BadURL``, ``Unanswered``)."""
    deadline = time.monotonic() + timeout
    _, address, prefix = split_url(url)
    try:
        if isinstance(address, str):  # unix:/path
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(address)
            except OSError:
                sock.close()
                raise
        else:
            sock = _connect(address, timeout)
    except TimeoutError:
        raise Unanswered(f"daemon at {url} unreachable (no connection within {timeout:g}s)", True) from None
    except OSError as e:
        raise Unanswered(f"daemon at {url} unreachable ({e.strerror or e})") from None
    try:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        chunks = []
        size = 0
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        sock.sendall(f"GET {prefix}{path} HTTP/1.0\r\nHost: discovery\r\n{auth}\r\n".encode())
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                break
            size += len(data)
            if size > max_body:
                raise Unanswered(f"daemon at {url}: answer larger than {max_body} bytes")
            chunks.append(data)
    except TimeoutError:
        raise Unanswered(f"daemon at {url}: no complete answer within {timeout:g}s", True) from None
    except Unanswered:
        raise
    except OSError as e:
        raise Unanswered(f"daemon at {url}: {e.strerror or e}") from None
    finally:
        sock.close()
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise Unanswered(f"daemon at {url}: malformed HTTP response")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = headers.get("content-length")
    if length is None or not length.isdigit() or int(length) != len(body):
        raise Unanswered(f"daemon at {url}: truncated response")
    return int(parts[1]), headers, body
