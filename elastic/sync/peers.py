"""The read-only rsync daemon a host serves its copy with, over the launcher's SSH session.

Shared by the relay (``elastic.sync.relay_run``: a host's verified copy) and the pipeline
(``elastic.sync.pipeline_run``: the chunks a host verified so far). ``PeerServer(host,
script, client)`` runs ``script(port)`` -- ``elastic.sync.relay.serve_script`` -- on the host,
sends it the secret and waits for ``relay=ready``; a taken port is tried again with another.
See ``elastic.sync.relay`` for the channel and its threat model.
"""
from __future__ import annotations

import random
import secrets
import subprocess
import threading
from collections.abc import Callable

from elastic.errors import SyncError
from elastic.ssh.exec import SSHClient, ssh_failure
from elastic.sync.relay import PeerSource, parse_serve

PORT_RANGE = (20000, 60000)


class PeerServer:
    """The read-only rsync daemon on one peer, alive as long as our SSH session to it.

    ``start`` blocks until the daemon answers (or raises ``SyncError``/``SSHError``); ``stop``
    closes the session's stdin (the script on the peer then kills the daemon and removes its
    files) and waits for ssh to end; ``alive`` is False once the session ended."""

    def __init__(self, host: str, script: Callable[[int], str], client: SSHClient,
                 rng: random.Random | None = None) -> None:
        self.host, self.script, self.client = host, script, client
        self._rng = rng or random.SystemRandom()
        self._proc: subprocess.Popen | None = None
        self.source: PeerSource | None = None
        self.failed = False  # start raised: this peer cannot serve

    def start(self, timeout: float = 60.0) -> PeerSource:
        try:
            return self._start(timeout)
        except BaseException:
            self.failed = True
            raise

    def _start(self, timeout: float) -> PeerSource:
        for _ in range(5):
            port = self._rng.randrange(*PORT_RANGE)
            secret = secrets.token_urlsafe(24)
            script = self.script(port)
            proc = subprocess.Popen(self.client.argv(self.host, script), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(secret.encode() + b"\n")
                proc.stdin.flush()
            except BrokenPipeError:
                pass
            line = _readline(proc, timeout)
            if not line:
                if proc.poll() is None:
                    proc.kill()
                code = proc.wait()
                err = proc.stderr.read() if proc.stderr is not None else b""
                _end(proc)
                if code == 255:
                    raise ssh_failure(self.host, err)
                raise SyncError(f"{self.host}: relay server did not start: "
                                f"{(err.decode('utf-8', 'replace').strip().splitlines() or ['no answer'])[-1]}")
            try:
                state = parse_serve(line.decode("utf-8", "replace"))
            except SyncError as exc:
                _end(proc)
                raise SyncError(f"{self.host}: cannot serve the dataset: {exc}") from exc
            if state == "busy":
                _end(proc)
                continue
            self._proc = proc
            self.source = PeerSource(self.host, port, secret)
            return self.source
        raise SyncError(f"{self.host}: no free port for the relay server")

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def gone(self) -> bool:
        """It failed to start, or its session ended (the peer died, or was deleted)."""
        return self.failed or (self._proc is not None and self._proc.poll() is not None)

    def stop(self) -> None:
        if self._proc is not None:
            _end(self._proc)
            self._proc = None


def _readline(proc: subprocess.Popen, timeout: float) -> bytes:
    """One line of ``proc``'s stdout within ``timeout`` (b"" on end of output or timeout)."""
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    return out[0] if out else b""


def _end(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
