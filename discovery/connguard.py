"""Connection limits for the daemon's HTTP server: a cap, and no connection left waiting.

aiohttp keeps a connection that sends nothing, or half a request a byte at a time, for its
keep-alive timeout (an hour by default). ``GuardedServer`` wraps aiohttp's protocol factory:

- at most ``max_connections`` at once; one more is closed at once (counted in ``refused``);
- a connection that is *waiting for a request* (just opened, between requests, or with a
  request only partly received) for more than ``idle_timeout`` seconds is closed (counted in
  ``closed_idle``). A request received in full is not waiting from the moment its last byte
  arrives -- however long the loop takes to parse it -- until its response is written; so a
  request being answered, including a long poll that waits for the next generation, is the
  handler's own business. This is decided from the bytes received and the responses written
  (see ``_GuardedProtocol``), never from aiohttp's private state.

``guarded_runner(app, ...)`` is an ``aiohttp.web.AppRunner`` whose server is guarded; use it
where ``web.AppRunner`` was used. Everything runs on the event loop's thread; the checks run
on a timer per connection, started by ``connection_made`` (never in a constructor).
"""
from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

MAX_CONNECTIONS = 256
IDLE_TIMEOUT = 5.0


_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 16384  # longer heads are scanned for their end only (their Content-Length is lost)
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*([0-9]{1,18})[ \t]*\r\n", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding[ \t]*:", re.IGNORECASE)


def _starts_response(data: bytes | bytearray | memoryview) -> bool:
    """A final response's status line (``HTTP/1.x NNN``, not an interim ``1xx``)."""
    return bytes(data[:7]) == b"HTTP/1." and bytes(data[9:10]) != b"1"


class _Counted:
    """The transport aiohttp's handler writes through: every ``write`` that starts a response
    (a final status line: aiohttp writes the status line at the start of one call) is
    counted; everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, proto: _GuardedProtocol) -> None:
        self._transport = transport
        self._proto = proto

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._proto._sent(_starts_response(data))
        self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        chunks = list(chunks)
        self._proto._sent(bool(chunks) and _starts_response(chunks[0]))
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _GuardedProtocol(asyncio.Protocol):
    """Forwards everything to aiohttp's ``RequestHandler``; closes the transport when the
    connection has been waiting for a request for longer than the guard allows.

    "Waiting" is decided from the bytes alone, as they pass through this protocol, never from
    the handler's state: ``requests`` counts request heads received complete (``\r\n\r\n``;
    a ``Content-Length`` body is skipped, not scanned), ``responses`` counts responses the
    handler began to write. The connection waits when every request has its response, the
    last response is not stuck in a full send buffer, and it waits *since* it was opened or
    since the handler last wrote. A request received is counted in ``data_received`` itself,
    before anything else runs on the loop, so however late the handler gets to parse it, the
    connection is not taken for idle. A head sent a byte at a time is still waiting (it is
    not complete). A head with ``Transfer-Encoding`` (no framing this scanner follows) makes
    the connection busy until its response, then the count restarts at the next byte."""

    def __init__(self, inner: Any, guard: GuardedServer) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0
        self._counted = False
        self.requests = 0
        self.responses = 0
        self._head = b""  # the current head so far (or the last 3 bytes, to find the end)
        self._body_left = 0  # Content-Length bytes of the last request still to come
        self._unframed = False  # a body this scanner cannot follow: busy until the response
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        if guard.open >= guard.max_connections:
            guard.refused += 1
            transport.abort()  # type: ignore[attr-defined]
            return
        guard.open += 1
        self._counted = True
        self._transport = transport  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        self._waiting_since = loop.time()
        self._timer = loop.call_later(guard.check_every, self._check)
        self._inner.connection_made(_Counted(transport, self))  # type: ignore[arg-type]

    def waiting(self) -> bool:
        """True when the connection owes no response (see the class docstring)."""
        return self.requests <= self.responses and not self._unframed and not self._paused

    def _sent(self, starts_response: bool) -> None:
        if starts_response:
            self.responses += 1
            if self._unframed and self.responses >= self.requests:
                self._unframed, self._head, self._body_left = False, b"", 0
        self._waiting_since = asyncio.get_running_loop().time()

    def _scan(self, data: bytes) -> None:
        while data and not self._unframed:
            if self._body_left:
                skip = min(self._body_left, len(data))
                self._body_left -= skip
                data = data[skip:]
                continue
            buf = self._head + data
            end = buf.find(_HEAD_END, max(0, len(self._head) - 3))
            if end < 0:
                self._head = buf if len(buf) <= _MAX_HEAD else buf[-3:]
                return
            head, data = buf[:end + 2], buf[end + 4:]
            self._head = b""
            self.requests += 1
            if _CHUNKED.search(head):
                self._unframed = True
                return
            m = _CONTENT_LENGTH.search(head)
            self._body_left = int(m.group(1)) if m else 0

    def _check(self) -> None:
        self._timer = None
        if self._transport is None or self._transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        if self.waiting() and loop.time() - self._waiting_since > self._guard.idle_timeout:
            self._guard.closed_idle += 1
            self._transport.abort()
            return
        self._timer = loop.call_later(self._guard.check_every, self._check)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._counted:
            return
        self._counted = False
        self._guard.open -= 1
        self._transport = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._counted:
            self._scan(data)
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._counted else None

    def pause_writing(self) -> None:
        self._paused = True
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._paused = False
        self._waiting_since = asyncio.get_running_loop().time()
        self._inner.resume_writing()


class GuardedServer:
    """aiohttp's ``web.Server`` with the limits above; other attributes are the server's."""

    def __init__(self, server: web.Server, *, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        if max_connections < 1 or not idle_timeout > 0:
            raise ValueError("max_connections must be >= 1 and idle_timeout > 0")
        self._server = server
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.check_every = min(1.0, idle_timeout / 2)
        self.open = 0
        self.refused = 0
        self.closed_idle = 0

    def __call__(self) -> _GuardedProtocol:
        return _GuardedProtocol(self._server(), self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class _GuardedRunner(web.AppRunner):
    def __init__(self, app: web.Application, *, max_connections: int, idle_timeout: float,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._limits = (max_connections, idle_timeout)
        self.guard: GuardedServer | None = None

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        self.guard = GuardedServer(server, max_connections=self._limits[0], idle_timeout=self._limits[1])
        return self.guard  # type: ignore[return-value]


def guarded_runner(app: web.Application, *, max_connections: int = MAX_CONNECTIONS,
                   idle_timeout: float = IDLE_TIMEOUT, **kwargs: Any) -> _GuardedRunner:
    """An ``AppRunner`` (same keyword arguments) whose connections are guarded; after
    ``setup()`` its ``guard`` attribute holds the counters."""
    return _GuardedRunner(app, max_connections=max_connections, idle_timeout=idle_timeout, **kwargs)
