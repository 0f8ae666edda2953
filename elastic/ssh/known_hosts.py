"""Pinned host keys: an OpenSSH ``known_hosts`` file kept by ``ssh-bootstrap hosts``.

``KnownHosts`` is an immutable value parsed from and rendered back to ``known_hosts`` text
(lines it does not manage -- hashed names, markers, comments -- are kept verbatim).  ``pin``
is the pure decision: a key seen for the first time is pinned (``new``), the same key again is
``same``, and a different key of the same type for the same ``[host]:port`` is ``changed`` --
the caller refuses it (``HostKeyMismatch``) and the file keeps the old pin.  ``repin`` is the
decision for a host known to be a new incarnation of the address (a new pod uid from the
API server): every pin for the name is replaced by the presented key (``repinned``).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from elastic.errors import HostKeyMismatch


def fingerprint(key_b64: str) -> str:
    """Return OpenSSH's ``SHA256:...`` fingerprint of a base64 key blob."""
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def host_key_name(host: str, port: int) -> str:
    """The name OpenSSH looks up: ``host`` for port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


@dataclass(frozen=True)
class Entry:
    """One managed line: names (comma-separated in the file), key type, base64 key."""

    names: tuple[str, ...]
    key_type: str
    key_b64: str

    def render(self) -> str:
        return f"{','.join(self.names)} {self.key_type} {self.key_b64}"


@dataclass(frozen=True)
class KnownHosts:
    """A parsed ``known_hosts`` file: managed entries plus verbatim other lines."""

    entries: tuple[Entry, ...] = ()
    other_lines: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, text: str) -> KnownHosts:
        entries, other = [], []
        for line in text.splitlines():
            parts = line.split()
            if not parts or line.lstrip().startswith("#") or parts[0].startswith(("|", "@")) or len(parts) < 3:
                if line.strip():
                    other.append(line)
                continue
            entries.append(Entry(tuple(parts[0].split(",")), parts[1], parts[2]))
        return cls(tuple(entries), tuple(other))

    def render(self) -> str:
        lines = list(self.other_lines) + [e.render() for e in self.entries]
        return "".join(line + "\n" for line in lines)

    def without(self, name: str) -> KnownHosts:
        """This file with ``name`` dropped from every managed entry (entries left nameless go)."""
        entries = []
        for e in self.entries:
            names = tuple(n for n in e.names if n != name)
            if names:
                entries.append(Entry(names, e.key_type, e.key_b64))
        return KnownHosts(tuple(entries), self.other_lines)

    def keys_for(self, name: str) -> dict[str, str]:
        """Pinned keys for ``name`` as ``{key_type: key_b64}``."""
        return {e.key_type: e.key_b64 for e in self.entries if name in e.names}


@dataclass(frozen=True)
class PinResult:
    """Outcome of ``pin``/``repin``: status ``new``/``same``/``changed``/``repinned``,
    fingerprints, updated file."""

    status: str
    fingerprint: str
    pinned_fingerprint: str
    known_hosts: KnownHosts


def pin(known: KnownHosts, name: str, key_type: str, key_b64: str) -> PinResult:
    """Decide what to do with a key a host presented (pure; never raises)."""
    seen = fingerprint(key_b64)
    pinned = known.keys_for(name).get(key_type)
    if pinned is None:
        entry = Entry((name,), key_type, key_b64)
        return PinResult("new", seen, seen, KnownHosts(known.entries + (entry,), known.other_lines))
    if pinned == key_b64:
        return PinResult("same", seen, seen, known)
    return PinResult("changed", seen, fingerprint(pinned), known)


def repin(known: KnownHosts, name: str, key_type: str, key_b64: str) -> PinResult:
    """Pin ``key_b64`` as the only key of ``name`` (pure): ``same`` if it is already pinned,
    ``new`` if ``name`` had no pin, else ``repinned`` (``pinned_fingerprint`` = the old key)."""
    seen = fingerprint(key_b64)
    old = known.keys_for(name)
    if old.get(key_type) == key_b64 and len(old) == 1:
        return PinResult("same", seen, seen, known)
    previous = old.get(key_type) or next(iter(old.values()), None)
    updated = known.without(name)
    updated = KnownHosts(updated.entries + (Entry((name,), key_type, key_b64),), updated.other_lines)
    if previous is None:
        return PinResult("new", seen, seen, updated)
    return PinResult("repinned", seen, fingerprint(previous), updated)


def mismatch_error(name: str, result: PinResult, known_hosts_path: str) -> HostKeyMismatch:
    """The loud error for a changed key, with the way out for a host that was really rebuilt."""
    return HostKeyMismatch(
        f"HOST KEY CHANGED for {name}: pinned {result.pinned_fingerprint}, presented {result.fingerprint}; "
        f"refusing to connect (possible man-in-the-middle). If the host was rebuilt, remove its pin: "
        f"ssh-keygen -R '{name}' -f {known_hosts_path}")
