"""Label and field selectors: parse the query-string form, match pods (pure).

Label selectors follow Kubernetes' grammar: requirements joined by ``,`` and all must hold::

    key  !key  key=value  key==value  key!=value  key in (a,b)  key notin (a,b)  key>1  key<1

``!=`` and ``notin`` also match objects without the key, as in Kubernetes. Field selectors are
``field=value``, ``field==value`` or ``field!=value`` joined by ``,`` over the pod fields the
real API server supports (``metadata.name``, ``metadata.namespace``, ``spec.nodeName``,
``status.phase``, ...). ``parse_labels`` and ``parse_fields`` raise ``BadRequest`` (HTTP 400)
naming the offending part; the parsed selectors are immutable and have one method, ``matches``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import BadRequest

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _check_key(key: str, selector: str) -> str:
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _PREFIX.match(prefix))) or not _NAME.match(name):
        raise BadRequest(f"unable to parse requirement: invalid label key {key!r} in selector {selector!r}")
    return key


def _check_value(value: str, selector: str) -> str:
    if not _VALUE.match(value):
        raise BadRequest(f"unable to parse requirement: invalid label value {value!r} in selector {selector!r}")
    return value


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``op`` is one of exists, !exists, =, !=, in, notin, gt, lt."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if value is None:  # absent
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        return number > int(self.values[0]) if self.op == "gt" else number < int(self.values[0])


@dataclass(frozen=True)
class LabelSelector:
    """All ``requirements`` must hold; the empty selector matches every object."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: dict | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),<>]+)")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:  # pragma: no cover - the pattern matches any non-space character
            raise BadRequest(f"unable to parse selector {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_labels(text: str | None) -> LabelSelector:
    """Parse a label selector string; ``None`` or blank means "everything". 400 when malformed."""
    if text is None or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def bad(why: str) -> BadRequest:
        return BadRequest(f"unable to parse requirement: {why} in selector {text!r}")

    def value_list(i: int) -> tuple[tuple[str, ...], int]:
        """The values of ``(a, b, ...)`` from ``toks[i]`` (just after the ``(``), and the index after ``)``."""
        values: list[str] = []
        expect_value = True
        while True:
            if i >= len(toks):
                raise bad("found end of input, expected ')'")
            t = toks[i]
            i += 1
            if t == ")":
                if expect_value and values:
                    values.append("")
                return tuple(values), i
            if t == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if t in ("(", "=", "==", "!=", "!", ">", "<") or not expect_value:
                raise bad(f"found {t!r}, expected a value, ',' or ')' in a value list")
            values.append(_check_value(t, text))
            expect_value = False

    while True:
        if i >= len(toks):
            raise bad("found end of input, expected a requirement")
        tok = toks[i]
        if tok == "!":
            if i + 1 >= len(toks) or toks[i + 1] in "!=(),<>" or toks[i + 1] in ("==", "!="):
                raise bad("expected a label key after '!'")
            reqs.append(Requirement(_check_key(toks[i + 1], text), "!exists"))
            i += 2
        elif tok in ("=", "==", "!=", "(", ")", ",", ">", "<"):
            raise bad(f"found {tok!r}, expected a label key")
        else:
            key = _check_key(tok, text)
            i += 1
            op = toks[i] if i < len(toks) else ","
            if op == ",":
                reqs.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                i += 1
                value = ""
                if i < len(toks) and toks[i] not in (",", "(", ")", "=", "==", "!=", "!", ">", "<"):
                    value = toks[i]
                    i += 1
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (_check_value(value, text),)))
            elif op in (">", "<"):
                i += 1
                if i >= len(toks) or not re.fullmatch(r"-?\d+", toks[i]):
                    raise bad(f"expected an integer after {op!r}")
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", (toks[i],)))
                i += 1
            elif op in ("in", "notin"):
                i += 1
                if i >= len(toks) or toks[i] != "(":
                    raise bad(f"expected '(' after {op!r}")
                vals, i = value_list(i + 1)
                if not vals:
                    raise bad(f"found empty value list for {op!r}")
                reqs.append(Requirement(key, op, vals))
            else:
                raise bad(f"found {op!r}, expected one of '=', '==', '!=', 'in', 'notin', ',', '<', '>'")
        if i >= len(toks):
            break
        if toks[i] != ",":
            raise bad(f"found {toks[i]!r}, expected ','")
        i += 1
    return LabelSelector(tuple(reqs))


# Pod fields the real API server accepts in a field selector, and how to read them.
def _path(*keys: str):
    def get(pod: dict) -> str:
        cur: object = pod
        for k in keys:
            cur = cur.get(k) if isinstance(cur, dict) else None
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return "" if cur is None else str(cur)
    return get


POD_FIELDS = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
    "spec.nodeName": _path("spec", "nodeName"),
    "spec.restartPolicy": _path("spec", "restartPolicy"),
    "spec.schedulerName": _path("spec", "schedulerName"),
    "spec.serviceAccountName": _path("spec", "serviceAccountName"),
    "spec.hostNetwork": lambda pod: "true" if (pod.get("spec") or {}).get("hostNetwork") else "false",
    "status.phase": _path("status", "phase"),
    "status.podIP": _path("status", "podIP"),
    "status.nominatedNodeName": _path("status", "nominatedNodeName"),
}


@dataclass(frozen=True)
class FieldSelector:
    """All ``(field, op, value)`` terms must hold (op is ``=`` or ``!=``)."""

    terms: tuple[tuple[str, str, str], ...] = ()

    def matches(self, pod: dict) -> bool:
        for field, op, value in self.terms:
            actual = POD_FIELDS[field](pod)
            if (actual == value) != (op == "="):
                return False
        return True

    def value_of(self, field: str) -> str | None:
        """The value an ``=`` term pins ``field`` to, if any (used to narrow a lookup)."""
        for f, op, v in self.terms:
            if f == field and op == "=":
                return v
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_fields(text: str | None) -> FieldSelector:
    """Parse a pod field selector; ``None`` or blank means "everything". 400 when malformed."""
    if text is None or not text.strip():
        return FieldSelector()
    terms = []
    for part in _split_unescaped(text, ","):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)(.*)$", part)
        if not m:
            raise BadRequest(f"invalid field selector: {part!r} is not field=value, field==value or field!=value")
        field, op, value = m.group(1), m.group(2), _unescape(m.group(3).strip())
        if field not in POD_FIELDS:
            raise BadRequest(f"field label not supported: {field}")
        terms.append((field, "!=" if op == "!=" else "=", value))
    return FieldSelector(tuple(terms))
