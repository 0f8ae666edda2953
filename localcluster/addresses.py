"""Pod addresses: a per-cluster 127.A.B.0/24 block and a round-robin pool over it.

- ``AddressPool(block)`` (pure) hands out ``127.A.B.1`` .. ``127.A.B.254`` round-robin: an address
  is not handed out again while unused ones remain, so a recreated pod gets a new IP.
  ``allocate()`` raises ``KubeletError`` when all 254 are taken; ``release(ip)`` returns one.
- ``claim_block(lock_dir, rng)`` picks a random block that no other cluster on this machine
  holds (an exclusive ``flock`` on ``lock_dir/127.A.B.lock``, kept for the life of the process)
  and on which nothing listens (``/proc/net/tcp``). Returns ``(block_prefix, lock_file)``.
"""
from __future__ import annotations

import fcntl
import os
import random
import socket
import struct

from .errors import KubeletError

DEFAULT_LOCK_DIR = "/tmp/elastic-horovod-local-cluster/blocks"


class AddressPool:
    """Round-robin addresses ``prefix.1`` .. ``prefix.254`` (``prefix`` like ``127.31.7``)."""

    def __init__(self, prefix: str) -> None:
        parts = prefix.split(".")
        if len(parts) != 3 or parts[0] != "127" or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
            raise ValueError(f"address block prefix must look like 127.A.B, got {prefix!r}")
        self.prefix = prefix
        self._used: set[int] = set()
        self._next = 1

    def allocate(self) -> str:
        for step in range(254):
            n = (self._next - 1 + step) % 254 + 1
            if n not in self._used:
                self._used.add(n)
                self._next = n % 254 + 1
                return f"{self.prefix}.{n}"
        raise KubeletError(f"no free address left in {self.prefix}.0/24 (254 pods)")

    def release(self, ip: str) -> None:
        if ip.startswith(self.prefix + "."):
            self._used.discard(int(ip.rsplit(".", 1)[1]))


def _listening_prefixes() -> set[str]:
    """``127.A.B`` of every IPv4 TCP socket bound on this machine (from /proc/net/tcp)."""
    out = set()
    try:
        with open("/proc/net/tcp") as fh:
            next(fh)
            for line in fh:
                local = line.split()[1].split(":")[0]
                ip = socket.inet_ntoa(struct.pack("<I", int(local, 16)))
                out.add(ip.rsplit(".", 1)[0])
    except OSError:
        pass
    return out


def claim_block(lock_dir: str = DEFAULT_LOCK_DIR, rng: random.Random | None = None):
    """Claim a free random ``127.A.B`` block; returns ``(prefix, open_lock_file)``."""
    rng = rng or random.Random()
    os.makedirs(lock_dir, exist_ok=True)
    try:
        os.chmod(lock_dir, 0o1777)
    except OSError:
        pass
    busy = _listening_prefixes()
    for _ in range(200):
        prefix = f"127.{rng.randint(16, 250)}.{rng.randint(0, 255)}"
        if prefix in busy:
            continue
        fh = open(os.path.join(lock_dir, prefix + ".lock"), "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        return prefix, fh
    raise KubeletError(f"could not find a free 127.A.B.0/24 address block (lock dir {lock_dir})")
