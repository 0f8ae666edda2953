"""What may be served or passed to a command as a host: the project's one host rule
(standard library only, no ``re``/``ipaddress``: ``discover-hosts`` imports it).

``host_ok(host)`` is True for an IPv4 literal in canonical dotted-quad form (no leading
zeros, no short forms) whose first octet is 1..223 (not ``0.0.0.0/8``, multicast or
reserved: nothing to ssh to), or an RFC 1123 name: labels of ASCII letters, digits and inner
``-``, 1..63 characters, 253 in all, no trailing dot, the last label not all digits (so no
resolver reads it as a number). No IPv6 literal: Horovod's ``host:slots`` has no room for
one. The daemon (``discovery.hosts``), ``discover-hosts`` and ``elastic`` all decide with it,
and bound a host's slots by ``MAX_SLOTS``.
"""
from __future__ import annotations

MAX_NAME = 253
MAX_SLOTS = 1024  # slots on one host: more is refused everywhere, as a typo deserves
MAX_LABEL = 63
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.")


def host_problem(host: object, *, underscore: bool = False) -> str | None:
    """Why ``host`` breaks the rule of the module docstring, or None when it keeps it.
    ``underscore``: ``_`` counts as a letter (the user's own ssh aliases, nothing served)."""
    if not isinstance(host, str) or not host:
        return "empty name"
    if len(host) > MAX_NAME:
        return f"longer than {MAX_NAME} characters"
    chars = _NAME_CHARS | {"_"} if underscore else _NAME_CHARS
    if not chars.issuperset(host):
        return "characters other than letters, digits, '-' and '.'"
    labels = host.split(".")
    for label in labels:
        if not label or len(label) > MAX_LABEL:
            return f"empty label or label longer than {MAX_LABEL} characters"
        if label[0] == "-" or label[-1] == "-":
            return "a label starts or ends with '-'"
    if not labels[-1].isdigit():
        return None
    if len(labels) != 4 or not all(label.isdigit() and str(int(label)) == label for label in labels):
        return "an all-numeric last label, and not an IPv4 address in canonical form"
    if not (0 < int(labels[0]) < 224 and all(int(label) <= 255 for label in labels)):
        return "not an IPv4 unicast address (first octet 1..223)"
    return None


def host_ok(host: object) -> bool:
    """See the module docstring."""
    return host_problem(host) is None
