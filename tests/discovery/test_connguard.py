"""discovery/connguard.py on a real aiohttp server (its own loop in a thread) and real sockets:
a request received while the loop is saturated is answered, not taken for an idle connection;
idle and half-sent connections are closed; a long poll and pipelined requests are not.

"Saturated" is made exact: a callback blocks the server's loop for longer than the idle
timeout while the request arrives, so the request's bytes, and the guard's overdue check,
are handled in the same loop iteration after it (what a loop busy with 10,000 pods and 100
readers does by chance)."""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from discovery.connguard import GuardedServer, guarded_runner
from tests.waiting import wait_for

IDLE = 0.5


@dataclass
class Served:
    loop: asyncio.AbstractEventLoop
    port: int
    guard: GuardedServer
    release: asyncio.Event

    def block(self, seconds: float) -> None:
        """Block the server's loop for ``seconds``; returns once the block has begun."""
        started = threading.Event()

        def hog() -> None:
            started.set()
            time.sleep(seconds)  # the saturation under test: nothing else runs on the loop
        self.loop.call_soon_threadsafe(hog)
        assert started.wait(10), "the server's loop did not run the block"

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        wait_for(lambda: self.guard.open >= 1, 10, "the guard to count the connection")
        return s


def _read_response(s: socket.socket) -> bytes:
    """One response (Content-Length framed); b"" if the server closed the connection first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0].split(b":")[1])
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            return b""
        body += chunk
    return head + b"\r\n\r\n" + body


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def served() -> Iterator[Served]:
    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}
    up = threading.Event()

    async def main() -> None:
        release = asyncio.Event()

        async def hello(request: web.Request) -> web.Response:
            return web.Response(text="hello\n")

        async def poll(request: web.Request) -> web.Response:
            await release.wait()
            return web.Response(text="changed\n")

        app = web.Application()
        app.router.add_get("/hello", hello)
        app.router.add_get("/poll", poll)
        runner = guarded_runner(app, idle_timeout=IDLE, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ready.update(port=runner.addresses[0][1], guard=runner.guard, release=release, runner=runner)
        up.set()
        stop = asyncio.Event()
        ready["stop"] = stop
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert up.wait(30), "the guarded server did not start"
    yield Served(loop, ready["port"], ready["guard"], ready["release"])
    loop.call_soon_threadsafe(lambda: loop.call_later(0, ready["stop"].set))
    thread.join(30)
    loop.close()


def test_a_request_received_on_a_saturated_loop_is_answered_not_closed(served: Served) -> None:
    s = served.connect()
    served.block(3 * IDLE)  # the connection has been open > IDLE when the loop next runs
    s.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
    response = _read_response(s)
    assert response.startswith(b"HTTP/1.1 200") and response.endswith(b"hello\n"), response
    assert served.guard.closed_idle == 0
    s.close()


def test_an_idle_connection_is_closed_after_the_timeout(served: Served) -> None:
    s = served.connect()
    s.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
    assert _read_response(s).startswith(b"HTTP/1.1 200")
    wait_for(lambda: served.guard.closed_idle == 1, 30, "the guard to close the idle keep-alive connection")
    assert _closed(s)
    s.close()


def test_a_head_sent_a_byte_at_a_time_is_still_waiting_and_closed(served: Served) -> None:
    s = served.connect()
    deadline = time.monotonic() + 30
    for b in b"GET /hello HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
        if served.guard.closed_idle:
            break
        try:
            s.send(bytes([b]))
        except OSError:
            break
        time.sleep(0.05)
        assert time.monotonic() < deadline, "a slow head kept its connection for 30 s"
    wait_for(lambda: served.guard.closed_idle == 1, 30, "the guard to close the half-sent request")
    s.close()


def test_a_long_poll_and_pipelined_requests_are_not_waiting(served: Served) -> None:
    s = served.connect()
    # a request answered at once, then a long poll, sent together (pipelined)
    s.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /poll HTTP/1.1\r\nHost: t\r\n\r\n")
    assert _read_response(s).endswith(b"hello\n")
    # the poll is owed: it outlives several idle timeouts
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 4 * IDLE, 30, "several idle timeouts to pass")
    assert served.guard.closed_idle == 0
    served.loop.call_soon_threadsafe(served.release.set)
    assert _read_response(s).endswith(b"changed\n")
    # a body of a request (Content-Length) is skipped, not scanned for heads
    body = b"\r\n\r\n" * 8
    s.sendall(b"GET /hello HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert _read_response(s).endswith(b"hello\n")
    wait_for(lambda: served.guard.closed_idle == 1, 30, "the guard to close the connection once answered")
    s.close()
