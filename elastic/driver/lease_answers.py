"""The driver's answer to the lease wrappers' questions (``shared.lease_wire``), installed into
Horovod's rendezvous HTTP server by ``install``: 200 to the wrappers of this run, ``OTHER_RUN``
to any other, on a kept connection (HTTP/1.1 keep-alive, idle for at most ``IDLE_SECONDS``).

A kept connection costs the driver no handshake and no new handler thread per renewal, and
through a driver stall a renewal waits in that connection's socket, not in the listen backlog.
Every other request is Horovod's, unchanged.
"""
from __future__ import annotations

from typing import Any

from shared.lease_wire import NO_RUN_ID, OTHER_RUN, SCOPE

IDLE_SECONDS = 30.0  # a kept connection nobody asks on (a vanished worker) is closed after this
PREFIX = f"/{SCOPE}/"


def answer(handler: Any, run_id: str | None) -> None:
    """Answer the lease question in handler.path and keep the connection open."""
    asked = handler.path[len(PREFIX):]
    ours = not run_id or asked in (run_id, NO_RUN_ID)
    handler.protocol_version = "HTTP/1.1"
    handler.send_response(200 if ours else OTHER_RUN)
    handler.send_header("Content-Length", "0")
    handler.end_headers()
    handler.close_connection = False
    handler.connection.settimeout(IDLE_SECONDS)


def install(run_id: str | None) -> None:
    """Make Horovod's rendezvous handler (and the elastic one built on it) answer the lease."""
    from horovod.runner.http.http_server import RendezvousHandler
    original = RendezvousHandler.do_GET
    if getattr(original, "answers_lease", False):
        return

    def do_GET(self: Any) -> None:
        if self.path.startswith(PREFIX):
            answer(self, run_id)
        else:
            original(self)
    do_GET.answers_lease = True  # type: ignore[attr-defined]
    RendezvousHandler.do_GET = do_GET
