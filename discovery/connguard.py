"""Connection limits for the daemon's HTTP server: a cap, and no connection left waiting.

aiohttp keeps a connection that sends nothing, or half a request a byte at a time, for its
keep-alive timeout (an hour by default). ``GuardedServer`` wraps aiohttp's protocol factory:

- at most ``max_connections`` at once; one more is closed at once (counted in ``refused``);
- a connection that is *waiting for a request* (just opened, between requests, or with a
  request only partly received) for more than ``idle_timeout`` seconds is closed (counted in
  ``closed_idle``). A request being answered -- including a long poll that waits for the
  next generation -- is not waiting: its time is the handler's own business.

``guarded_runner(app, ...)`` is an ``aiohttp.web.AppRunner`` whose server is guarded; use it
where ``web.AppRunner`` was used. Everything runs on the event loop's thread; the checks run
on a timer per connection, started by ``connection_made`` (never in a constructor).
"""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

MAX_CONNECTIONS = 256
IDLE_TIMEOUT = 5.0


class _GuardedProtocol(asyncio.Protocol):
    """Forwards everything to aiohttp's ``RequestHandler``; closes the transport when the
    handler has been waiting for a request for longer than the guard allows."""

    def __init__(self, inner: Any, guard: GuardedServer) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_since: float | None = None
        self._counted = False

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
        self._inner.connection_made(transport)

    def _busy(self) -> bool:
        return bool(getattr(self._inner, "_request_in_progress", False))

    def _check(self) -> None:
        self._timer = None
        if self._transport is None or self._transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._busy():
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since > self._guard.idle_timeout:
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
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._counted else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
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
                   idle_timeout: float = IDLE_TIMEOUT, **kwargs: Any) -> web.AppRunner:
    """An ``AppRunner`` (same keyword arguments) whose connections are guarded; after
    ``setup()`` its ``guard`` attribute holds the counters."""
    return _GuardedRunner(app, max_connections=max_connections, idle_timeout=idle_timeout, **kwargs)
