"""Waits that explain themselves: while too few hosts are served for ``--min-np``, say which
pods there are and why each is not served yet.

- ``explain(doc, min_slots)`` (pure): the discovery daemon's ``/hosts.json`` document ->
  the lines to print, or None once the served slots reach ``min_slots``. Each pod that is
  not served gets a line with its reason: waiting (``not running``, ``not ready``, ``no pod
  IP``, ``terminating``...), being prepared (SSH key pinning and dataset sync by the prepare
  hook), or skipped (a bad annotation, a failed preparation...).
- ``WaitExplainer(url, min_slots)``: ``start()`` starts one thread that reads ``/hosts.json``
  every ``interval`` seconds and logs ``explain``'s lines whenever they change (and again
  every ``repeat`` seconds while they do not) until enough slots are served or ``stop()``
  (safe twice; waits for the thread, with a deadline: ``shared.worker``). A daemon that
  does not answer is reported once per change like any other state.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable

from shared import daemon_client
from shared import discovery_wire as wire
from shared.worker import Worker

log = logging.getLogger("elastic.run")

PREPARING_TEXT = "being prepared (SSH host key pinning, dataset sync)"


def _slots(hosts: list) -> int:
    total = 0
    for h in hosts:
        slots = h.get("slots") if isinstance(h, dict) else None
        total += slots if isinstance(slots, int) and slots > 0 else 1
    return total


def _text(value: object, limit: int = 200) -> str:
    """A value from the daemon (hostile until shown otherwise) as one short printable line."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def explain(doc: object, min_slots: int) -> list[str] | None:
    """Why fewer than ``min_slots`` slots are served (see the module docstring); None when
    enough are."""
    if not isinstance(doc, dict):
        return [f"waiting for hosts: the discovery daemon answered {_text(doc, 80)!r}"]
    if not doc.get("synced", True):
        return ["waiting for hosts: the discovery daemon has not listed the pods yet"]
    listed_hosts = doc.get("hosts")
    hosts = listed_hosts if isinstance(listed_hosts, list) else []
    served = _slots(hosts)
    if served >= min_slots:
        return None
    lines = [f"waiting for hosts: {served} of the {min_slots} slots --min-np needs are served "
             f"({len(hosts)} host{'s' if len(hosts) != 1 else ''})"]
    pods: list[tuple[str, str]] = []
    for entry in doc.get("waiting_pods") or []:
        if isinstance(entry, dict):
            pods.append((_text(entry.get("pod"), 80), _text(entry.get("reason"))))
    for entry in doc.get("preparing") or []:
        if isinstance(entry, dict):
            pods.append((f"{_text(entry.get('pod'), 80)} ({_text(entry.get('host'), 80)})", PREPARING_TEXT))
    for entry in doc.get("skipped") or []:
        if isinstance(entry, dict):
            pods.append((_text(entry.get("pod"), 80), f"skipped: {_text(entry.get('reason'))}"))
    for pod, why in sorted(pods):
        lines.append(f"  {pod}: {why}")
    listed = len(doc.get("waiting_pods") or [])
    waiting = doc.get("waiting")
    counted = waiting if isinstance(waiting, dict) else {}
    unnamed = sum(n for n in counted.values() if isinstance(n, int)) - listed
    if unnamed > 0:
        by_reason = ", ".join(f"{n} {_text(r, 60)}" for r, n in sorted(counted.items()) if isinstance(n, int))
        lines.append(f"  ... and {unnamed} more pods not served ({by_reason})")
    if len(lines) == 1:
        seen = doc.get("pods_seen")
        lines.append("  no pod matches the selector yet" if not seen else
                     f"  {seen} pods seen, none of them a host yet")
    return lines


def fetch_hosts_json(url: str, timeout: float = 5.0) -> dict:
    """``GET url/hosts.json`` through ``shared.daemon_client`` (``http://`` or ``unix:``, the
    bearer token from ``DISCOVERY_TOKEN``) as a dict (a 503 before the first sync answers
    ``synced: false``); raises ``OSError``/``ValueError`` when the daemon does not answer
    with JSON."""
    status, _, body = daemon_client.get(url, wire.HOSTS_JSON, os.environ.get(daemon_client.TOKEN_ENV) or None,
                                        timeout, 4 << 20)
    if status == 503:
        return {"synced": False}
    if status != 200:
        raise OSError(f"discovery daemon at {url} answered {wire.HOSTS_JSON} with HTTP {status}")
    return json.loads(body)  # hostile until shown otherwise: explain() copes with a non-dict


class WaitExplainer:
    """Logs why the job still waits for hosts (see the module docstring)."""

    def __init__(self, url: str, min_slots: int, interval: float = 2.0, repeat: float = 30.0,
                 fetch: Callable[[str], dict] = fetch_hosts_json, emit: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._url, self._min, self._interval, self._repeat = url, min_slots, interval, repeat
        self._fetch, self._clock = fetch, clock
        self._emit = emit or (lambda line: log.info("%s", line))
        self._worker = Worker(self._run, "wait-explainer")
        self._stop = self._worker.stopping
        self.satisfied = threading.Event()  # set once enough slots were served

    def start(self) -> None:
        """Start explaining (once; ``shared.worker``)."""
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop; waits up to ``timeout`` for the thread's last look. True when it has ended;
        raises what ended the thread, if anything did."""
        return self._worker.stop(timeout)

    def check_once(self) -> list[str] | None:
        """One look at the daemon: the explanation, or None when enough slots are served."""
        try:
            doc = self._fetch(self._url)
        except (OSError, ValueError) as exc:
            return [f"waiting for hosts: the discovery daemon at {self._url} does not answer ({_text(exc, 120)})"]
        return explain(doc, self._min)

    def _run(self) -> None:
        last, said_at = None, 0.0
        while True:  # after ``stop()``, one last look: a short job may end before the next poll
            lines = self.check_once()
            if lines is None:
                if last is not None:
                    self._emit("enough hosts are served; horovodrun starts the workers")
                self.satisfied.set()
                return
            if self._stop.is_set():
                return
            now = self._clock()
            if lines != last or now - said_at >= self._repeat:
                for line in lines:
                    self._emit(line)
                last, said_at = lines, now
            self._stop.wait(self._interval)
