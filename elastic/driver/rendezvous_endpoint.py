"""The rendezvous server's fixed endpoint: the port it listens on and the address the workers
are told to reach it at, the same for every launcher of one job.

Horovod binds its elastic rendezvous server to a random free port and tells each worker the
launcher's own address (``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``, set once in the worker's
environment). The workers reach the driver there for every reset, their check-ins and the
lease, so a standby launcher that adopts a running world must answer at the address they
already hold. With ``ELASTIC_RENDEZVOUS_PORT`` the server listens on that port (all
addresses, as Horovod's) or horovodrun fails at once naming it; with
``ELASTIC_RENDEZVOUS_ADDRESS`` the workers of an elastic run are told that address instead of
the launcher's: a name or IP that follows whichever launcher leads (a Service in deploy/).
With ``ELASTIC_RENDEZVOUS_BIND`` (and the port) the server listens on that one address of this
host instead of all of them: each launcher its own, as each launcher pod of deploy/ has its own
IP, so a frozen leader's server holding the port on its address does not keep the next
leader's from listening on its own (on one machine: two addresses of 127.0.0.0/8); the
workers are told ``ELASTIC_RENDEZVOUS_ADDRESS``, or that address when it is unset.

``parse_port``, ``parse_address`` and ``parse_bind`` check the values (``BadEndpoint`` names
the bad one); ``install`` makes horovodrun's elastic launch use them (``PortTaken`` when the
port is taken or the address is not this host's).
"""
from __future__ import annotations

import errno
import ipaddress
import re
import time
from typing import Any

from elastic.errors import BadEndpoint, PortTaken

RETRY_SECS = 0.25  # between two tries of a port in use
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def parse_port(raw: str, name: str) -> int:
    """A TCP port from 1 to 65535, or ``BadEndpoint`` naming ``name``."""
    try:
        port = int(raw)
    except ValueError:
        raise BadEndpoint(f"{name} must be a TCP port number, got {raw!r}") from None
    if not 1 <= port <= 65535:
        raise BadEndpoint(f"{name} must be from 1 to 65535, got {raw!r}")
    return port


def parse_address(raw: str, name: str) -> str:
    """An IPv4/IPv6 address or a DNS name (RFC 1123 labels, at most 253 characters), as given,
    or ``BadEndpoint`` naming ``name``: it goes into every worker's environment."""
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        pass
    labels = raw[:-1].split(".") if raw.endswith(".") else raw.split(".")
    if not raw or len(raw) > 253 or not all(_LABEL.match(label) for label in labels):
        raise BadEndpoint(f"{name} must be an IP address or a DNS name, got {raw!r}")
    return raw


def parse_bind(raw: str, name: str) -> str:
    """An IPv4 address to listen on (Horovod's server is IPv4), as written, or ``BadEndpoint``
    naming ``name``; whether this host has it is the bind's to say (``PortTaken``)."""
    try:
        return str(ipaddress.IPv4Address(raw))
    except ValueError:
        raise BadEndpoint(f"{name} must be an IPv4 address of this host, got {raw!r}") from None


def _bind_exactly(port: int, wait: float = 0.0, host: str = ""):
    """A ``find_port`` for Horovod's rendezvous server that binds ``host`` (every address when
    empty) and ``port`` or fails naming them; a port in use is tried again for up to ``wait``
    seconds (a lost launcher's process, still ending, holds it)."""
    where = f"{host}:{port}" if host else f"port {port}"

    def find_port(server_factory: Any) -> tuple[Any, int]:
        deadline = time.monotonic() + wait
        while True:
            try:
                return server_factory((host, port)), port
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                    raise PortTaken(f"the rendezvous server cannot listen on {where}: {exc.strerror}") from None
            time.sleep(RETRY_SECS)
    return find_port


def install(port: int | None, address: str | None, wait: float = 0.0, bind: str | None = None) -> None:
    """Make horovodrun's elastic launch listen on ``port`` of ``bind`` (every address when
    None; waiting up to ``wait`` seconds for it while another process holds it) and tell its
    workers ``address`` (``bind`` when None and bound; each left as Horovod's when None:
    nothing of Horovod is touched then). ``bind`` needs ``port`` (ValueError)."""
    if bind is not None and port is None:
        raise ValueError("a rendezvous bind address needs its port")
    address = address if address is not None else bind
    if port is None and address is None:
        return
    from horovod.runner import gloo_run
    from horovod.runner.http import http_server

    if port is not None:
        find_port = _bind_exactly(port, wait, bind or "")

        class FixedPortRendezvousServer(http_server.RendezvousServer):
            """Horovod's rendezvous server on ``port``; only its ``start`` finds the port."""

            def start(self, handler_cls: Any = http_server.RendezvousHandler) -> int:
                chosen = http_server.find_port
                http_server.find_port = find_port
                try:
                    return super().start(handler_cls)
                finally:
                    http_server.find_port = chosen

        gloo_run.RendezvousServer = FixedPortRendezvousServer

    if address is not None:
        run_env = gloo_run.create_run_env_vars
        told = address

        def create_run_env_vars(server_ip: str, nics: Any, port_: int, elastic: bool = False) -> dict:
            # a static run's workers are started by this launcher alone: its own address
            return run_env(told if elastic else (bind or server_ip), nics, port_, elastic)

        gloo_run.create_run_env_vars = create_run_env_vars
