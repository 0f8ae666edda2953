"""The files that make OpenSSH -- and horovodrun -- use the pinned keys.

Pure renderers plus ``BootstrapDir`` (paths inside ``ssh-bootstrap hosts --out DIR``):

* ``ssh_config``: ``Host *`` with the port, user, identity, ``UserKnownHostsFile`` = the pinned
  file and ``StrictHostKeyChecking yes``;
* ``bin/ssh``: a wrapper that runs the real ssh with ``-F ssh_config -o StrictHostKeyChecking=yes``
  *before* the caller's arguments.  horovodrun hard-codes ``ssh -o StrictHostKeyChecking=no``
  (horovod/runner/util/remote.py); OpenSSH keeps the first value it sees for an option, so with
  ``DIR/bin`` first on ``PATH`` horovodrun's ssh checks the pinned keys;
* ``bootstrap.json``: port, identity and paths, read back by ``horovodrun_args``/``horovodrun_env``.

Python API for the launcher::

    from elastic.ssh.config import BootstrapDir, horovodrun_args, horovodrun_env
    d = BootstrapDir("/run/elastic-horovod/ssh")
    cmd = ["horovodrun", *horovodrun_args(d), ...]          # --ssh-port, --ssh-identity-file
    env = horovodrun_env(d, os.environ)                       # PATH with DIR/bin first, ELASTIC_SSH_CONFIG

Both raise ``ConfigError`` if ``bootstrap.json`` is missing (run ``ssh-bootstrap hosts`` first).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from elastic.environment import ELASTIC_SSH_CONFIG
from elastic.errors import ConfigError

SSH_CONFIG_ENV = ELASTIC_SSH_CONFIG


@dataclass(frozen=True)
class BootstrapDir:
    """The paths under an ``ssh-bootstrap hosts --out DIR`` directory."""

    root: Path

    def __init__(self, root: str | os.PathLike) -> None:
        object.__setattr__(self, "root", Path(root).absolute())

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def hostfile(self) -> Path:
        return self.root / "hostfile"

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def ssh_wrapper(self) -> Path:
        return self.bin_dir / "ssh"

    @property
    def settings(self) -> Path:
        return self.root / "bootstrap.json"


def _config_value(value: str) -> str:
    if any(c in value for c in '"\n\r'):
        raise ConfigError(f"path {value!r} cannot be written into an ssh_config")
    return f'"{value}"' if any(c.isspace() for c in value) else value


SERVER_ALIVE_INTERVAL = 2
SERVER_ALIVE_COUNT = 3


def render_ssh_config(identity: str, known_hosts: str, port: int, user: str = "root",
                      connect_timeout: int = 10) -> str:
    """Return the ssh_config text: every host on ``port`` as ``user`` with ``identity``, keys
    checked strictly against ``known_hosts`` only; a silent server ends the session after
    ``SERVER_ALIVE_INTERVAL`` x ``SERVER_ALIVE_COUNT`` seconds."""
    lines = [
        "# Written by ssh-bootstrap. Host keys are pinned in UserKnownHostsFile; a changed key is refused.",
        "Host *",
        f"  User {_config_value(user)}",
        f"  Port {int(port)}",
        f"  IdentityFile {_config_value(identity)}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {_config_value(known_hosts)}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  CheckHostIP no",
        "  HashKnownHosts no",
        "  BatchMode yes",
        "  PasswordAuthentication no",
        "  KbdInteractiveAuthentication no",
        f"  ConnectTimeout {int(connect_timeout)}",
        # a peer that went silent (frozen, partitioned, gone) ends the session in
        # SERVER_ALIVE_INTERVAL x SERVER_ALIVE_COUNT seconds, not TCP's hours: horovodrun
        # sees its worker's ssh exit (and the workers' sshd has ClientAlive* to match)
        f"  ServerAliveInterval {SERVER_ALIVE_INTERVAL}",
        f"  ServerAliveCountMax {SERVER_ALIVE_COUNT}",
        "  LogLevel ERROR",
    ]
    return "\n".join(lines) + "\n"


def render_ssh_wrapper(real_ssh: str, ssh_config: str, known_hosts: str) -> str:
    """Return the ``bin/ssh`` wrapper script (POSIX sh)."""
    from shlex import quote

    return (
        "#!/bin/sh\n"
        "# Written by ssh-bootstrap: ssh with the pinned host keys, first on PATH for horovodrun.\n"
        "# OpenSSH uses the first value given for an option, so these win over horovodrun's\n"
        "# '-o StrictHostKeyChecking=no'.\n"
        f"exec {quote(real_ssh)} -F {quote(ssh_config)} -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={quote(known_hosts)} \"$@\"\n"
    )


def render_settings(identity: str, port: int, user: str) -> str:
    """Return ``bootstrap.json`` text."""
    return json.dumps({"identity": identity, "port": int(port), "user": user}, indent=1) + "\n"


def _settings(d: BootstrapDir) -> dict:
    try:
        data = json.loads(d.settings.read_text())
        return {"identity": str(data["identity"]), "port": int(data["port"]), "user": str(data["user"])}
    except FileNotFoundError:
        raise ConfigError(f"{d.settings} is missing; run 'ssh-bootstrap hosts --out {d.root}' first") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot read {d.settings}: {exc}") from exc


def horovodrun_args(d: BootstrapDir, *, hostfile: bool = False) -> list[str]:
    """horovodrun flags for the bootstrapped SSH: ``--ssh-port P --ssh-identity-file F``, and
    ``--hostfile DIR/hostfile`` when ``hostfile`` (static host sets; elastic runs use
    ``--host-discovery-script`` instead)."""
    settings = _settings(d)
    args = ["--ssh-port", str(settings["port"]), "--ssh-identity-file", settings["identity"]]
    if hostfile:
        args += ["--hostfile", str(d.hostfile)]
    return args


def horovodrun_env(d: BootstrapDir, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for horovodrun: ``base`` (default ``os.environ``) with ``DIR/bin`` first on
    ``PATH`` (the pinning ssh wrapper) and ``ELASTIC_SSH_CONFIG`` naming ``DIR/ssh_config``."""
    _settings(d)
    env = dict(os.environ if base is None else base)
    path = env.get("PATH", os.defpath)
    env["PATH"] = f"{d.bin_dir}{os.pathsep}{path}" if path else str(d.bin_dir)
    env[SSH_CONFIG_ENV] = str(d.ssh_config)
    return env


def horovodrun_env_delta(d: BootstrapDir) -> dict[str, str]:
    """Only the variables ``horovodrun_env`` changes, with ``PATH`` as ``DIR/bin:$PATH``."""
    _settings(d)
    return {"PATH": f"{d.bin_dir}{os.pathsep}$PATH", SSH_CONFIG_ENV: str(d.ssh_config)}
