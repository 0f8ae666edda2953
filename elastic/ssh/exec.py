"""Run commands on hosts with OpenSSH (the same client and ssh_config horovodrun uses).

``SSHClient`` builds argument vectors (pure: ``argv``, ``rsh``) and runs them (``run``; with ``control_dir`` the first
call to a host opens a shared connection, ``close_master`` ends it).  ``run`` blocks until the remote command ends or
``timeout`` passes and returns ``subprocess.CompletedProcess`` (bytes); it raises ``SSHError``
when ssh itself fails (exit 255: refused, unreachable, authentication, host key), with the
last line of ssh's stderr, so callers can tell a host problem from a failing remote command.
Remote scripts run under ``sh -c`` whatever the login shell is.

With ``control_dir`` set, the first call to a host leaves a master connection behind
(``ControlMaster=auto``, ``ControlPersist``; the backgrounded master does not hold our pipes)
that later calls and rsync (``rsh``) reuse; ``close_master`` ends it.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from elastic.common.hostlist import validate_host_name
from elastic.common.procs import tied_run
from elastic.errors import HostKeyUnverified, SSHError

HOST_KEY_FAILURE = "Host key verification failed"


def ssh_failure(host: str, stderr: bytes | str) -> SSHError:
    """Turn ssh's stderr (exit 255) into a typed one-line error."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any(HOST_KEY_FAILURE in line or "REMOTE HOST IDENTIFICATION HAS CHANGED" in line for line in lines):
        return HostKeyUnverified(
            f"{host}: host key verification failed (host not pinned or key changed; run ssh-bootstrap hosts)")
    last = lines[-1] if lines else "ssh failed without a message"
    return SSHError(f"{host}: {last}")


@dataclass(frozen=True)
class SSHClient:
    """OpenSSH with an optional ``-F ssh_config``; ``control_dir`` enables connection reuse."""

    config: str | None = None
    ssh: str = "ssh"
    connect_timeout: int = 10
    control_dir: str | None = None

    def base(self) -> list[str]:
        """ssh and its options, without host or command."""
        args = [self.ssh]
        if self.config:
            args += ["-F", self.config]
        args += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}"]
        if self.control_dir:
            # The first call to a host becomes the (background) master, later ones reuse it;
            # an idle master of a killed run goes away by itself after 60 s.
            args += ["-o", f"ControlPath={self.control_dir}/%C", "-o", "ControlMaster=auto",
                     "-o", "ControlPersist=60"]
        return args

    def argv(self, host: str, script: str) -> list[str]:
        """The argument vector that runs ``script`` with ``sh -c`` on ``host`` (``ConfigError``
        if ``host`` is not a valid host name: it may come from a pod)."""
        return self.base() + ["--", validate_host_name(host), "sh -c " + shlex.quote(script)]

    def rsh(self) -> str:
        """The ``rsync -e`` value (rsync splits it on spaces and honours quotes)."""
        return " ".join(shlex.quote(a) for a in self.base())

    def run(self, host: str, script: str, *, stdin: bytes | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``script`` on ``host``; raise ``SSHError`` when ssh fails (not when the script does)."""
        try:
            proc = tied_run(self.argv(host, script), input=stdin if stdin is not None else b"",
                            capture_output=True, timeout=timeout)  # killed if we are
        except subprocess.TimeoutExpired as exc:
            raise SSHError(f"{host}: no answer within {timeout:g}s") from exc
        except OSError as exc:
            raise SSHError(f"cannot run {self.ssh}: {exc.strerror}") from exc
        if proc.returncode == 255:
            raise ssh_failure(host, proc.stderr)
        return proc

    def close_master(self, host: str) -> None:
        """End the shared connection to ``host`` if there is one (never raises)."""
        if not self.control_dir:
            return
        try:
            subprocess.run(self.base() + ["-O", "exit", "--", host], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass
