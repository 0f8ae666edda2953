"""Why the first world did not form: no capacity (try again later) or failing workers (a failure).

When ``--first-world-timeout`` passes with no world (``elastic.launch.gang``), what kept it from
forming decides the exit code:

- ``EXIT_NO_CAPACITY`` (75): every worker that is missing is one the cluster has no place for
  yet (``not scheduled``: a full or still growing pool; or fewer pods than needed exist), or one
  placed so recently (within ``ready_timeout``) that capacity, not the pod, was what it lacked.
  In deploy/ the Job tries again without counting a failure.
- ``EXIT_WORKERS_FAILING`` (69): some missing worker has its place and fails: a container
  crash-loops or cannot start (``failing``: ``CrashLoopBackOff``, an image pull error, a bad
  config; the pod ``Failed``), its preparation failed (SSH, the dataset sync) or it was skipped
  (bad settings), or it has been placed for ``ready_timeout`` seconds or more and is still not
  ready, not running or being prepared. Also when enough slots were served for
  ``ready_timeout`` and still no world formed (the workers do not start), and when the
  discovery daemon cannot say why (no answer, never synced). A retry would meet the same
  failure: the Job counts it, and fails once its ``backoffLimit`` is spent.

- ``judge(doc, min_slots, placed_since, served_since, now, ready_timeout)`` (pure): the
  ``Verdict`` for one hosts document (``shared.hosts_document``), the times each pod was first
  seen placed but not served, and the time the served slots first reached ``min_slots``.
  ``Verdict.exit_code`` is None when enough slots are served but for less than
  ``ready_timeout``: the world is probably forming, ask again later.
- ``ShortfallTracker(min_slots, ready_timeout)``: a subscriber of the launcher's daemon watch
  (``elastic.launch.watch.DaemonWatch``): ``see(when, answer)`` keeps the last document and
  those times; ``verdict(now)`` is ``judge`` on them. Thread-safe (the watch's thread sees, the
  monitor's thread asks).
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from elastic.launch.waits import printable, waiting_reason
from shared import discovery_wire as wire
from shared.exitcodes import EXIT_NO_CAPACITY, EXIT_WORKERS_FAILING
from shared.hosts_document import HostsDocument

# Placed but not served yet: a pod in one of these states past ``ready_timeout`` is failing.
_STARTING = frozenset({wire.WAIT_NOT_RUNNING, wire.WAIT_NOT_READY, wire.WAIT_NO_IP})
_SHOWN_PODS = 5  # pods named in a verdict's reason; the rest are counted


@dataclass(frozen=True)
class Verdict:
    """``exit_code`` (``EXIT_NO_CAPACITY``, ``EXIT_WORKERS_FAILING``, or None: not yet) and
    ``reason``, one line naming the pods and what each lacks."""

    exit_code: int | None
    reason: str


def _named(items: list[str]) -> str:
    shown = "; ".join(items[:_SHOWN_PODS])
    more = len(items) - _SHOWN_PODS
    return shown + (f"; and {more} more" if more > 0 else "")


def judge(doc: HostsDocument | None, min_slots: int, placed_since: Mapping[str, float],
          served_since: float | None, now: float, ready_timeout: float) -> Verdict:
    """The verdict on a first world that did not form (module docstring). Pure."""
    if doc is None or not doc.synced:
        return Verdict(EXIT_WORKERS_FAILING, "the discovery daemon never listed the job's pods, so nothing "
                                             "says capacity is what is missing (its log says why)")
    served = doc.slots()
    if served >= min_slots:
        if served_since is not None and now - served_since < ready_timeout:
            return Verdict(None, f"{served} slots are served; the world is forming")
        held = now - served_since if served_since is not None else 0.0
        return Verdict(EXIT_WORKERS_FAILING,
                       f"{served} slots were served for {held:.0f} s but no world formed: the workers did not "
                       "start or did not reach hvd.init (their output above)")
    failing: list[str] = []
    for s in doc.skipped:
        failing.append(f"{printable(s.pod, 80)}: {printable(s.reason, 160)}")
    starting: list[str] = []
    unplaced: list[str] = []
    for w in doc.waiting_pods:
        pod, why = printable(w.pod, 80), waiting_reason(w, 40, 160)
        if w.reason == wire.WAIT_FAILING:
            failing.append(f"{pod}: {why}")
        elif w.reason == wire.WAIT_NOT_SCHEDULED:
            unplaced.append(f"{pod}: {why}")
        elif w.reason in _STARTING:
            since = placed_since.get(w.pod)
            if since is not None and now - since >= ready_timeout:
                failing.append(f"{pod}: {why} for {now - since:.0f} s")
            else:
                starting.append(f"{pod}: {why}")
    for p in doc.preparing:
        since = placed_since.get(p.pod)
        if since is not None and now - since >= ready_timeout:
            failing.append(f"{printable(p.pod, 80)}: being prepared (SSH host key, dataset sync) "
                           f"for {now - since:.0f} s")
        else:
            starting.append(f"{printable(p.pod, 80)}: being prepared")
    head = f"{served} of the {min_slots} slots --min-np needs are served"
    if failing:
        return Verdict(EXIT_WORKERS_FAILING, f"{head}, and not for lack of capacity: workers that have their "
                                             f"place are failing: {_named(failing)}")
    others = unplaced + starting
    unnamed = sum(doc.waiting.values()) - len(doc.waiting_pods)
    if unnamed > 0:
        others.append(f"{unnamed} more pods not served")
    if not others:
        others.append("no worker pod exists beyond those served (is the worker ReplicaSet at its size? "
                      "kubectl describe replicaset)")
    return Verdict(EXIT_NO_CAPACITY, f"{head}; the rest lack capacity: {_named(others)}")


class ShortfallTracker:
    """Follows the daemon's answers for ``judge`` (module docstring)."""

    def __init__(self, min_slots: int, ready_timeout: float):
        if not ready_timeout > 0:
            raise ValueError(f"ready_timeout must be positive, got {ready_timeout}")
        self._min, self._ready_timeout = min_slots, ready_timeout
        self._lock = threading.Lock()
        self._doc: HostsDocument | None = None
        self._placed_since: dict[str, float] = {}
        self._served_since: float | None = None

    def see(self, when: float, answer: HostsDocument | Exception) -> None:
        """A ``DaemonWatch`` subscriber: keep a synced document and the times in it."""
        if not isinstance(answer, HostsDocument) or not answer.synced:
            return
        placed = {w.pod for w in answer.waiting_pods if w.reason in _STARTING} | {p.pod for p in answer.preparing}
        with self._lock:
            self._doc = answer
            self._placed_since = {pod: self._placed_since.get(pod, when) for pod in placed}
            if answer.slots() < self._min:
                self._served_since = None
            elif self._served_since is None:
                self._served_since = when

    def verdict(self, now: float) -> Verdict:
        """``judge`` on the last document seen, at ``now`` (the watch's clock: unix seconds)."""
        with self._lock:
            return judge(self._doc, self._min, dict(self._placed_since), self._served_since, now,
                         self._ready_timeout)
