"""Waits that explain themselves: while too few hosts are served for ``--min-np``, say which
pods there are and why each is not served yet.

- ``explain(doc, min_slots)`` (pure): the discovery daemon's hosts document
  (``shared.hosts_document.HostsDocument``) -> the lines to print, or None once the served
  slots reach ``min_slots``. Each pod that is not served gets a line with its reason: waiting
  (``not running``, ``not ready``, ``no pod IP``, ``terminating``...), being prepared (SSH key
  pinning and dataset sync by the prepare hook), or skipped (a bad annotation, a failed
  preparation...).
- ``WaitExplainer(min_slots)``: a subscriber of the launcher's one daemon subscription
  (``elastic.launch.watch.DaemonWatch``): ``see(when, answer)`` logs ``explain``'s lines
  whenever they change (and again every ``repeat`` seconds while they do not) until enough
  slots are served (``satisfied``). A daemon that does not answer, or answers something that
  is not a hosts document, is reported once per change like any other state.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable

from shared import daemon_client
from shared import discovery_wire as wire
from shared.hosts_document import BadDocument, HostsDocument, WaitingPod

log = logging.getLogger("elastic.run")

PREPARING_TEXT = "being prepared (SSH host key pinning, dataset sync)"


def printable(value: object, limit: int = 200) -> str:
    """A value from the daemon (hostile until shown otherwise) as one short printable line:
    unprintable characters as ``?``, cut to ``limit`` characters with ``...``."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= limit else text[:limit - 3] + "..."



def waiting_reason(pod: WaitingPod, reason_limit: int = 200, detail_limit: int = 200) -> str:
    """Why ``pod`` is not served, printable: its reason, and its detail in parentheses when the
    daemon gave one."""
    detail = f" ({printable(pod.detail, detail_limit)})" if pod.detail else ""
    return printable(pod.reason, reason_limit) + detail

def explain(doc: HostsDocument, min_slots: int) -> list[str] | None:
    """Why fewer than ``min_slots`` slots are served (see the module docstring); None when
    enough are."""
    if not doc.synced:
        return ["waiting for hosts: the discovery daemon has not listed the pods yet"]
    served = doc.slots()
    if served >= min_slots:
        return None
    n = len(doc.hosts)
    lines = [f"waiting for hosts: {served} of the {min_slots} slots --min-np needs are served "
             f"({n} host{'s' if n != 1 else ''})"]
    pods: list[tuple[str, str]] = [(printable(w.pod, 80), waiting_reason(w)) for w in doc.waiting_pods]
    pods += [(f"{printable(p.pod, 80)} ({printable(p.host, 80)})", PREPARING_TEXT) for p in doc.preparing]
    pods += [(printable(k.pod, 80), f"skipped: {printable(k.reason)}") for k in doc.skipped]
    for pod, why in sorted(pods):
        lines.append(f"  {pod}: {why}")
    unnamed = sum(doc.waiting.values()) - len(doc.waiting_pods)
    if unnamed > 0:
        by_reason = ", ".join(f"{n} {printable(r, 60)}" for r, n in sorted(doc.waiting.items()))
        lines.append(f"  ... and {unnamed} more pods not served ({by_reason})")
    if len(lines) == 1:
        lines.append("  no pod matches the selector yet" if not doc.pods_seen else
                     f"  {doc.pods_seen} pods seen, none of them a host yet")
    return lines


def fetch_hosts_json(url: str, timeout: float = 5.0) -> HostsDocument:
    """``GET url/hosts.json`` through ``shared.daemon_client`` (``http://`` or ``unix:``, the
    bearer token from ``DISCOVERY_TOKEN``), parsed (a 503 before the first sync is a document
    that is not synced); raises ``OSError`` when the daemon does not answer and ``ValueError``
    (``BadDocument`` naming the field) when the answer is not a hosts document."""
    status, _, body = daemon_client.get(url, wire.HOSTS_JSON, os.environ.get(daemon_client.TOKEN_ENV) or None,
                                        timeout, 4 << 20)
    if status == 503:
        return HostsDocument(synced=False)
    if status != 200:
        raise OSError(f"discovery daemon at {url} answered {wire.HOSTS_JSON} with HTTP {status}")
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise BadDocument(f"not JSON ({exc})") from None
    return HostsDocument.parse(value)


def describe(answer: HostsDocument | Exception, url: str, min_slots: int) -> list[str] | None:
    """``explain`` for an answer of the daemon, or the line for a failed one. Pure."""
    if isinstance(answer, HostsDocument):
        return explain(answer, min_slots)
    if isinstance(answer, BadDocument):
        return [f"waiting for hosts: the discovery daemon at {url} answered something that is not a hosts "
                f"document ({printable(answer, 120)})"]
    return [f"waiting for hosts: the discovery daemon at {url} does not answer ({printable(answer, 120)})"]


class WaitExplainer:
    """Logs why the job still waits for hosts (see the module docstring)."""

    def __init__(self, url: str, min_slots: int, repeat: float = 30.0, emit: Callable[[str], None] | None = None):
        self._url, self._min, self._repeat = url, min_slots, repeat
        self._emit = emit or (lambda line: log.info("%s", line))
        self._last: list[str] | None = None
        self._said_at = 0.0
        self.satisfied = False  # enough slots were served: nothing more to say

    def see(self, when: float, answer: HostsDocument | Exception) -> None:
        """One answer of the daemon at ``when`` (seconds): say what changed, or that the wait is over."""
        if self.satisfied:
            return
        lines = describe(answer, self._url, self._min)
        if lines is None:
            if self._last is not None:
                self._emit("enough hosts are served; horovodrun starts the workers")
            self.satisfied = True
            return
        if lines != self._last or when - self._said_at >= self._repeat:
            for line in lines:
                self._emit(line)
            self._last, self._said_at = lines, when
