"""A Service on the local cluster: one address that forwards each new TCP connection to the
backend that is Ready, readiness judged as the kubelet judges a readiness probe.

What it stands for: deploy/'s ``Service/elastic-horovod-rendezvous``, whose one endpoint is
the Ready launcher pod. The kubelet probes each launcher pod (``readinessProbe`` in
deploy/job/launcher.yaml: an HTTP GET of ``/elastic-run-lease/-`` on the rendezvous port,
answered only by a leader's horovodrun), and kube-proxy sends each new connection to the
address of a Ready endpoint. On one machine each launcher's rendezvous server listens on its
own 127.0.0.0/8 address (``elastic-run --rendezvous-bind``), as each pod has its own IP, and
this proxy listens on the Service's.

The probe, as the kubelet runs it (``Probe``, from the manifest: ``probe_from_manifest``):
every ``period`` seconds one GET with a ``timeout`` (connect and answer); a status from 200 to
399 is a success, anything else a failure (refused, reset, timed out: a frozen server accepts
the connection in its kernel and never answers). A backend starts not Ready, becomes Ready
after ``success_threshold`` successes in a row and not Ready after ``failure_threshold``
failures in a row (``Readiness``, pure).

The forwarding, as kube-proxy's (iptables: the Service address is rewritten to an endpoint's
when a connection starts): each new connection goes to a backend Ready at that moment (the
first of the order given when several are; deploy/ has one leader); a connection already
forwarded stays with its backend whatever its readiness becomes (conntrack keeps it); with no
Ready backend the connection is reset (kube-proxy rejects a Service without endpoints). Bytes
are copied both ways; one side's end of its stream is passed on as a half-close, an error
resets the other side.

``python -m localcluster.serviceproxy --listen HOST:PORT --backend HOST:PORT [--backend ...]
[--probe-path PATH] [--period S] [--timeout S] [--failure-threshold N] [--success-threshold N]``
prints ``serviceproxy: listening on HOST:PORT`` once it accepts, then one line each time a
backend's readiness changes (``serviceproxy: HOST:PORT Ready`` / ``... not Ready: <why>``),
and runs until SIGTERM or SIGINT; bad input is one line (``error: ...``) and exit 2, an
address it cannot listen on one line and exit 1.
"""
from __future__ import annotations

import argparse
import http.client
import ipaddress
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.argparser import OneLineParser
from shared.runner import run_main

Address = tuple[str, int]
CHUNK = 65536
CONNECT_TIMEOUT = 5.0  # a Ready backend's kernel accepts at once, frozen or not


@dataclass(frozen=True)
class Probe:
    """A readiness probe's settings (Kubernetes' names and defaults but the path)."""
    path: str = "/"
    period: float = 10.0
    timeout: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1


def probe_from_manifest(manifest: Path, container: str) -> Probe:
    """The ``httpGet`` readinessProbe of ``container`` in the first workload of ``manifest`` (a
    multi-document YAML file) that has one; ValueError when there is none."""
    import yaml

    for doc in yaml.safe_load_all(manifest.read_text()):
        spec = (doc or {}).get("spec", {})
        pod = spec.get("template", {}).get("spec", spec)
        for c in pod.get("containers", []) if isinstance(pod, dict) else []:
            found = c.get("readinessProbe") if c.get("name") == container else None
            if found and "httpGet" in found:
                return Probe(path=found["httpGet"].get("path", "/"), period=float(found.get("periodSeconds", 10)),
                             timeout=float(found.get("timeoutSeconds", 1)),
                             failure_threshold=int(found.get("failureThreshold", 3)),
                             success_threshold=int(found.get("successThreshold", 1)))
    raise ValueError(f"{manifest}: no httpGet readinessProbe for a container named {container!r}")


class Readiness:
    """One backend's readiness from its probe results (pure): not Ready at first, Ready after
    ``success_threshold`` successes in a row, not Ready after ``failure_threshold`` failures."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.ready = False
        self._run = 0  # successes (> 0) or failures (< 0) in a row

    def observe(self, ok: bool) -> bool:
        """Count one result; True when readiness changed."""
        self._run = (max(self._run, 0) + 1) if ok else (min(self._run, 0) - 1)
        was = self.ready
        if ok and self._run >= self.probe.success_threshold:
            self.ready = True
        elif not ok and -self._run >= self.probe.failure_threshold:
            self.ready = False
        return self.ready != was


def probe_once(backend: Address, probe: Probe) -> str | None:
    """One HTTP GET of ``probe.path`` on ``backend``: None on a status from 200 to 399, else why not."""
    conn = http.client.HTTPConnection(backend[0], backend[1], timeout=probe.timeout)
    try:
        conn.request("GET", probe.path)
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        conn.close()
    return None if 200 <= status < 400 else f"HTTP {status}"


def _reset(sock: socket.socket) -> None:
    """Close with a reset (RST), as a rejected or broken connection ends."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _copy(src: socket.socket, dst: socket.socket, done: Callable[[bool], None]) -> None:
    """Copy src to dst until src's stream ends (passed on as a half-close) or fails."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                dst.shutdown(socket.SHUT_WR)
                done(True)
                return
            dst.sendall(data)
    except OSError:
        done(False)


class ServiceProxy:
    """Listens on ``listen``; each accepted connection goes to the first Ready of ``backends``."""

    def __init__(self, listen: Address, backends: Sequence[Address], probe: Probe,
                 say: Callable[[str], None] = print) -> None:
        self.backends = list(backends)
        self.probe = probe
        self._say = say
        self._readiness = {b: Readiness(probe) for b in self.backends}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = socket.create_server(listen, backlog=1024)
        self.address: Address = self._server.getsockname()[:2]
        self._threads: list[threading.Thread] = []

    def ready(self) -> list[Address]:
        with self._lock:
            return [b for b in self.backends if self._readiness[b].ready]

    def start(self) -> ServiceProxy:
        for backend in self.backends:
            self._spawn(self._probe_loop, backend)
        self._spawn(self._accept_loop)
        self._say(f"serviceproxy: listening on {self.address[0]}:{self.address[1]}")
        return self

    def stop(self) -> None:
        self._stopping.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()

    def _spawn(self, target: Callable, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _probe_loop(self, backend: Address) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            why = probe_once(backend, self.probe)
            with self._lock:
                changed = self._readiness[backend].observe(why is None)
                ready = self._readiness[backend].ready
            if changed:
                self._say(f"serviceproxy: {backend[0]}:{backend[1]} " + ("Ready" if ready else f"not Ready: {why}"))
            # the kubelet's ticker: the next probe a period after this one began (at once if it took longer)
            self._stopping.wait(max(0.0, began + self.probe.period - time.monotonic()))

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            ready = self.ready()
            if not ready:
                _reset(client)
                continue
            self._spawn(self._forward, client, ready[0])

    def _forward(self, client: socket.socket, backend: Address) -> None:
        try:
            upstream = socket.create_connection(backend, timeout=CONNECT_TIMEOUT)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        ends: list[bool] = []
        lock = threading.Lock()

        def done(clean: bool) -> None:
            with lock:
                ends.append(clean)
                last = len(ends) == 2
            if not clean:  # one side broke: the other is reset (both copies then end)
                for sock in (client, upstream):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            if last:
                (client.close if all(ends) else (lambda: _reset(client)))()
                upstream.close()

        back = threading.Thread(target=_copy, args=(upstream, client, done), daemon=True)
        back.start()
        _copy(client, upstream, done)
        back.join()


def parse_endpoint(raw: str, name: str) -> Address:
    """``IPv4:PORT`` -> (address, port); ValueError naming ``name``."""
    host, sep, port = raw.rpartition(":")
    try:
        address = str(ipaddress.IPv4Address(host))
        number = int(port)
    except ValueError:
        raise ValueError(f"{name} must be IPv4:PORT, got {raw!r}") from None
    if not sep or not 0 <= number <= 65535:
        raise ValueError(f"{name} must be IPv4:PORT, got {raw!r}")
    return address, number


def _positive(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError(raw)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(prog="python -m localcluster.serviceproxy",
                      description="a Service: each connection to the backend a readiness probe finds Ready")
    p.add_argument("--listen", required=True, metavar="IPv4:PORT", help="the Service's address and port")
    p.add_argument("--backend", action="append", required=True, metavar="IPv4:PORT",
                   help="an endpoint (a pod's address and the target port); repeat")
    p.add_argument("--probe-path", default=Probe.path, help="the readiness probe's httpGet path")
    p.add_argument("--period", type=_positive, default=Probe.period, help="periodSeconds")
    p.add_argument("--timeout", type=_positive, default=Probe.timeout, help="timeoutSeconds")
    p.add_argument("--failure-threshold", type=int, default=Probe.failure_threshold, help="failureThreshold")
    p.add_argument("--success-threshold", type=int, default=Probe.success_threshold, help="successThreshold")
    args = p.parse_args(argv)
    return run_main("serviceproxy", lambda: _serve(args), usage=ValueError, failure=(ValueError, OSError))


def _serve(args: argparse.Namespace) -> int:
    listen = parse_endpoint(args.listen, "--listen")
    backends = [parse_endpoint(raw, "--backend") for raw in args.backend]
    if args.failure_threshold < 1 or args.success_threshold < 1:
        raise ValueError("--failure-threshold and --success-threshold must be at least 1")
    probe = Probe(args.probe_path, args.period, args.timeout, args.failure_threshold, args.success_threshold)
    proxy = ServiceProxy(listen, backends, probe, say=lambda line: print(line, flush=True))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    proxy.start()
    stop.wait()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
