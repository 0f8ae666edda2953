"""sshd for one pod: its config (pure), its host key, and the readiness probe.

- ``render_config(...)`` returns the text of a Debian OpenSSH ``sshd_config`` that listens on one
  address and port, uses its own host key, accepts only the cluster key
  (``AuthorizedKeysFile``), has no PAM, and allows many concurrent handshakes (horovodrun opens
  many sessions at once: ``MaxStartups 100:30:200``; and a cheap key exchange, curve25519),
  and ends the session of a client silent for ``CLIENT_ALIVE_INTERVAL`` x
  ``CLIENT_ALIVE_COUNT`` seconds (``ClientAlive*``).
- ``make_host_key(path)`` writes an ed25519 host key with ssh-keygen (KubeletError on failure).
- ``probe(ip, port, timeout)`` (async) is True once the port answers with an ``SSH-`` banner.
"""
from __future__ import annotations

import asyncio
import os

from .errors import KubeletError
from .keys import make_keypair

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
CLIENT_ALIVE_INTERVAL = 2
CLIENT_ALIVE_COUNT = 3


def render_config(address: str, port: int, host_key: str, authorized_keys: str, pid_file: str = "none") -> str:
    sftp = SFTP_SERVER if os.path.exists(SFTP_SERVER) else "internal-sftp"
    return "\n".join([
        "# written by localcluster's kubelet for one pod",
        f"ListenAddress {address}:{port}",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized_keys}",
        f"PidFile {pid_file}",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "MaxStartups 100:30:200",
        # the post-quantum default (sntrup761) costs ~0.5 s of CPU per connection on a busy
        # machine; on loopback curve25519 is plenty, and horovodrun opens many connections
        "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256",
        "MaxSessions 200",
        "UseDNS no",
        # a client that went silent (frozen, gone) ends its session within 6 s, as on the
        # worker image (images/sshd_config): no session outlives its peer
        f"ClientAliveInterval {CLIENT_ALIVE_INTERVAL}",
        f"ClientAliveCountMax {CLIENT_ALIVE_COUNT}",
        "PrintMotd no",
        "PrintLastLog no",
        "AcceptEnv LANG LC_* HOROVOD_* ELASTIC_*",
        "PermitUserEnvironment no",
        "LogLevel INFO",  # one line per accepted connection: `kubectl logs POD` shows the sessions
        f"Subsystem sftp {sftp}",
        "",
    ])


def make_host_key(path: str) -> None:
    """A pod's ed25519 host key at ``path`` (``keys.make_keypair``); ``KubeletError`` on failure."""
    make_keypair(path, "localcluster-host", KubeletError)


async def probe(ip: str, port: int, timeout: float = 1.0) -> bool:
    """True when ``ip:port`` accepts a connection and sends an SSH banner within ``timeout``."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
        return line.startswith(b"SSH-")
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
