"""Host lists: parse and validate the hosts that ``ssh-bootstrap`` and ``dataset-sync`` work on.

Pure functions, no I/O.  Accepted forms (one entry per item/line):

* ``--hosts h1,h2:4``: comma-separated ``name[:slots]``;
* a hosts file: one ``name``, ``name:slots`` (what ``discover-hosts`` prints) or
  ``name slots=N`` (Horovod's hostfile) per line, ``#`` comments and blank lines ignored.

A host name is what ``shared.hosts.host_ok`` (the project's one host rule) accepts -- an
IPv4 address in canonical form, first octet 1..223, or an RFC 1123 name -- except that
``_`` is allowed in names here, for the user's own hosts (labels of letters, digits, ``_``
and inner ``-``, at most 63 characters each and 253 in all, a
last label that is not all digits): anything else (spaces, shell syntax, ``user@``,
option-looking names, control characters, IPv6 literals, which Horovod's ``host:slots``
format cannot carry) raises ``ConfigError`` naming the offending entry, escaped. Slots are
ASCII digits in 1..1024. Lines are split on ``\n`` only, as Horovod splits them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from elastic.errors import ConfigError
from shared.hosts import MAX_SLOTS, host_problem

_SLOTS_KW = re.compile(r"slots=(\S+)")


@dataclass(frozen=True)
class Host:
    """One host: the name or address ssh connects to, and its Horovod slots."""

    name: str
    slots: int = 1


def validate_host_name(name: str) -> str:
    """Return ``name`` if it is an IPv4 address in canonical form or an RFC 1123 host name
    (``_`` allowed, see the module docstring), else raise ``ConfigError`` (the value escaped
    in the message)."""
    if not name:
        raise ConfigError("empty host name")
    if name.startswith("-"):
        raise ConfigError(f"host name {name[:80]!r} looks like an option")
    if ":" in name:
        raise ConfigError(f"host name {name[:80]!r}: IPv6 literals are not supported (use a DNS name)")
    problem = host_problem(name, underscore=True)  # the one rule (shared.hosts)
    if problem is not None:
        raise ConfigError(f"host name {name[:80]!r} is not a host name: {problem}")
    return name


def _slots(text: str, entry: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f"bad slots {text[:20]!r} in host entry {entry[:80]!r}")
    value = int(text)
    if value < 1:
        raise ConfigError(f"slots must be >= 1 in host entry {entry[:80]!r}")
    if value > MAX_SLOTS:
        raise ConfigError(f"slots must be <= {MAX_SLOTS} in host entry {entry[:80]!r}")
    return value


def split_host_slots(line: str, default_slots: int = 1) -> tuple[str, int]:
    """``name:slots`` as the discovery daemon serves it -> ``(name, slots)``, without validating
    (the launcher reads lines the daemon already checked); no numeric slots part -> the whole
    line and ``default_slots``. The one place in ``elastic`` that splits ``host:slots``."""
    name, sep, slots = line.rpartition(":")
    if sep and name and slots.isascii() and slots.isdigit():
        return name, int(slots)
    return line, default_slots


def parse_entry(entry: str, default_slots: int = 1) -> Host:
    """Parse one ``name``, ``name:slots`` or ``name slots=N`` entry."""
    text = entry.strip()
    if not text:
        raise ConfigError("empty host entry")
    if text.startswith("-"):
        raise ConfigError(f"host entry {text!r} looks like an option")
    parts = text.split()
    if len(parts) == 2 and _SLOTS_KW.fullmatch(parts[1]):
        return Host(validate_host_name(parts[0]), _slots(parts[1][len("slots="):], entry))
    if len(parts) != 1:
        raise ConfigError(f"bad host entry {entry!r}")
    name, sep, slots = text.rpartition(":")
    if sep and name and ":" not in name:  # strict: bad slots are an error here, unlike split_host_slots
        return Host(validate_host_name(name), _slots(slots, entry))
    return Host(validate_host_name(text), default_slots)


def _unique(hosts: list[Host]) -> list[Host]:
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise ConfigError(f"host {host.name!r} is listed twice")
        seen.add(host.name)
    return hosts


def parse_host_list(text: str, default_slots: int = 1) -> list[Host]:
    """Parse ``--hosts`` (``h1,h2:4``); raise ``ConfigError`` on a bad or repeated entry."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise ConfigError("the host list is empty")
    return _unique([parse_entry(item, default_slots) for item in items])


def parse_hosts_file(text: str, default_slots: int = 1) -> list[Host]:
    """Parse a hosts file (``discover-hosts`` output or a Horovod hostfile); may be empty."""
    hosts = []
    for line in text.split("\n"):
        line = line.split("#", 1)[0].strip()
        if line:
            hosts.append(parse_entry(line, default_slots))
    return _unique(hosts)


def render_hostfile(hosts: list[Host]) -> str:
    """Return Horovod's hostfile text (``name slots=N`` lines) for ``hosts``."""
    return "".join(f"{h.name} slots={h.slots}\n" for h in hosts)


def merge_hostfile(existing: list[Host], handled: list[str], good: list[Host]) -> list[Host]:
    """The hostfile after one ``ssh-bootstrap hosts`` call (pure): every host of ``existing`` not
    ``handled`` by the call stays, in place; a handled host is replaced by its ``good`` entry
    (new slots) or dropped if it failed; good hosts not listed before are appended."""
    fresh = {h.name: h for h in good}
    gone = set(handled) - set(fresh)
    merged = [fresh.pop(h.name, h) for h in existing if h.name not in gone]
    return merged + [h for h in good if h.name in fresh]
