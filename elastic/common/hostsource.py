"""Where host lists come from when no flag names them: ``discover-hosts``.

``discover_hosts(command)`` runs the command (default ``discover-hosts``, which asks the
discovery daemon), blocks up to ``timeout`` seconds, and parses its ``host:slots`` lines.
Raises ``ConfigError`` with the command's last stderr line when it fails or prints no host.
"""

from __future__ import annotations

import shlex
import subprocess

from elastic.common.hostlist import Host, parse_hosts_file
from elastic.errors import ConfigError


def discover_hosts(command: str = "discover-hosts", timeout: float = 30) -> list[Host]:
    """Run ``command`` (``discover-hosts`` by default) and parse its ``host:slots`` lines."""
    try:
        proc = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"no hosts given and '{command}' could not run: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"no hosts given and '{command}' failed: {last}")
    hosts = parse_hosts_file(proc.stdout)
    if not hosts:
        raise ConfigError(f"no hosts given and '{command}' printed none")
    return hosts
