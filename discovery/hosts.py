"""The pure rule: pods (dicts as the Kubernetes API returns them, parsed JSON) -> Horovod hosts.

Standard library only, no I/O, no clock: ``discover-hosts --fallback api`` imports it too.

A pod is a host when it is ``Running``, its ``Ready`` condition is ``True``, it has no
``deletionTimestamp`` and it has a ``podIP``. Anything else is *waiting* (not an error,
counted by reason). A pod that would be a host but whose settings are wrong (bad slots
annotation, bad GPU limit, no usable address) is *skipped* with a reason, never a crash.

Slots: the annotation ``elastic-horovod/slots`` (a positive integer), else the sum of the
containers' ``nvidia.com/gpu`` limits when positive, else ``default_slots``.

Address (``Rules.address``):

- ``ip``   the pod IP (a recreated pod gets a new address, so Horovod's blacklist of the
  old incarnation does not shut it out). Horovod splits ``host:slots`` on ``:``, so for an
  IPv6 pod IP the pod's DNS name is served instead, or the pod is skipped if it has none.
- ``dns``  ``<spec.hostname>.<spec.subdomain>.<namespace>.svc.<cluster_domain>`` (a headless
  service); pods without hostname and subdomain are skipped.
- ``name`` the pod name.

Order is stable: by creation time, then namespace, then name, so hosts that joined earlier
keep their place when others join.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

SLOTS_ANNOTATION = "elastic-horovod/slots"
GPU_RESOURCE = "nvidia.com/gpu"
ADDRESS_MODES = ("ip", "dns", "name")

# Reasons a pod is waiting (not yet or no longer a host); not errors.
WAIT_NOT_RUNNING = "not running"
WAIT_NOT_READY = "not ready"
WAIT_TERMINATING = "terminating"
WAIT_NO_IP = "no pod IP"
WAIT_NO_GROUP = "no group label"


@dataclass(frozen=True)
class Rules:
    """How pods become hosts. Checked on construction; the bad value is in the message."""

    default_slots: int = 1
    address: str = "ip"
    group_by: str | None = None
    cluster_domain: str = "cluster.local"

    def __post_init__(self) -> None:
        if not isinstance(self.default_slots, int) or self.default_slots < 1:
            raise ValueError(f"default slots must be a positive integer, got {self.default_slots!r}")
        if self.address not in ADDRESS_MODES:
            raise ValueError(f"address must be one of {', '.join(ADDRESS_MODES)}, got {self.address!r}")
        if self.group_by is not None and not self.group_by:
            raise ValueError("group-by label must not be empty")
        if not self.cluster_domain or "/" in self.cluster_domain:
            raise ValueError(f"bad cluster domain {self.cluster_domain!r}")


@dataclass(frozen=True, order=True)
class Host:
    """One Horovod host: ``host:slots``; the sort key fields come first."""

    created: str
    namespace: str
    pod: str
    host: str = field(compare=False)
    slots: int = field(compare=False)
    uid: str = field(compare=False)
    ip: str = field(compare=False)
    group: str | None = field(compare=False, default=None)

    def line(self) -> str:
        return f"{self.host}:{self.slots}"


@dataclass(frozen=True)
class Skipped:
    """A pod that would be a host but cannot be served; ``reason`` says why."""

    namespace: str
    pod: str
    uid: str
    reason: str


@dataclass(frozen=True)
class Waiting:
    """A pod that is not (yet, or any more) a host, for an ordinary reason."""

    namespace: str
    pod: str
    uid: str
    reason: str


Verdict = Host | Skipped | Waiting


@dataclass(frozen=True)
class HostResult:
    """``hosts`` in stable order, ``skipped`` pods with reasons, ``waiting`` counts by reason."""

    hosts: tuple[Host, ...]
    skipped: tuple[Skipped, ...]
    waiting: Mapping[str, int]


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def parse_slots(value: Any) -> int:
    """A slots value as an annotation gives it -> positive int; ``ValueError`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"not a positive integer: {value!r}")
    n = int(text)
    if n < 1 or n > 4096:
        raise ValueError(f"out of range 1..4096: {value!r}")
    return n


def parse_gpu_quantity(value: Any) -> int:
    """A ``nvidia.com/gpu`` limit (a whole-number quantity) -> int; ``ValueError`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value.strip())
    raise ValueError(f"not a whole number of GPUs: {value!r}")


def _dns_name(pod: Mapping[str, Any], namespace: str, rules: Rules) -> str | None:
    hostname = _get(pod, "spec", "hostname")
    subdomain = _get(pod, "spec", "subdomain")
    if not hostname or not subdomain:
        return None
    return f"{hostname}.{subdomain}.{namespace}.svc.{rules.cluster_domain}"


def classify(pod: Mapping[str, Any], rules: Rules) -> Verdict:
    """One pod -> ``Host`` | ``Skipped`` | ``Waiting``. Never raises on odd input."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "")
    uid = str(meta.get("uid") or "")
    status = _get(pod, "status") or {}

    if meta.get("deletionTimestamp"):
        return Waiting(namespace, name, uid, WAIT_TERMINATING)
    if _get(status, "phase") != "Running":
        return Waiting(namespace, name, uid, WAIT_NOT_RUNNING)
    conditions = _get(status, "conditions")
    ready = False
    if isinstance(conditions, list):
        for cond in conditions:
            if isinstance(cond, dict) and cond.get("type") == "Ready":
                ready = cond.get("status") == "True"
    if not ready:
        return Waiting(namespace, name, uid, WAIT_NOT_READY)
    ip = _get(status, "podIP")
    if not ip or not isinstance(ip, str):
        return Waiting(namespace, name, uid, WAIT_NO_IP)

    group = None
    if rules.group_by is not None:
        labels = meta.get("labels")
        group = labels.get(rules.group_by) if isinstance(labels, dict) else None
        if not group:
            return Waiting(namespace, name, uid, WAIT_NO_GROUP)

    annotations = meta.get("annotations")
    raw = annotations.get(SLOTS_ANNOTATION) if isinstance(annotations, dict) else None
    if raw is not None:
        try:
            slots = parse_slots(raw)
        except ValueError as e:
            return Skipped(namespace, name, uid, f"bad annotation {SLOTS_ANNOTATION}: {e}")
    else:
        gpus = 0
        containers = _get(pod, "spec", "containers")
        for c in containers if isinstance(containers, list) else ():
            limit = _get(c, "resources", "limits", GPU_RESOURCE)
            if limit is None:
                continue
            try:
                gpus += parse_gpu_quantity(limit)
            except ValueError as e:
                return Skipped(namespace, name, uid, f"bad {GPU_RESOURCE} limit: {e}")
        slots = gpus if gpus > 0 else rules.default_slots

    if rules.address == "name":
        host = name
    elif rules.address == "dns" or ":" in ip:
        host = _dns_name(pod, namespace, rules)
        if host is None:
            why = "IPv6 pod IP needs a DNS name" if rules.address == "ip" else "--address dns"
            return Skipped(namespace, name, uid,
                           f"{why}: pod has no spec.hostname and spec.subdomain")
    else:
        host = ip
    return Host(created=str(meta.get("creationTimestamp") or ""), namespace=namespace, pod=name,
                host=host, slots=slots, uid=uid, ip=ip, group=group)


def collect(verdicts: Iterable[Verdict]) -> HostResult:
    """Verdicts -> ``HostResult``: hosts sorted stably, skipped sorted, waiting counted.

    Two pods that map to the same host string (e.g. ``--address name`` across namespaces)
    would be one host to Horovod: the later one is skipped with a reason.
    """
    hosts: list[Host] = []
    skipped: list[Skipped] = []
    waiting: dict[str, int] = {}
    for v in verdicts:
        if isinstance(v, Host):
            hosts.append(v)
        elif isinstance(v, Skipped):
            skipped.append(v)
        else:
            waiting[v.reason] = waiting.get(v.reason, 0) + 1
    hosts.sort(key=lambda h: (h.created, h.namespace, h.pod))
    seen: set[tuple[str | None, str]] = set()
    unique: list[Host] = []
    for h in hosts:
        key = (h.group, h.host)
        if key in seen:
            skipped.append(Skipped(h.namespace, h.pod, h.uid, f"duplicate host {h.host!r}"))
            continue
        seen.add(key)
        unique.append(h)
    skipped.sort(key=lambda s: (s.namespace, s.pod))
    return HostResult(tuple(unique), tuple(skipped), waiting)


def pods_to_hosts(pods: Iterable[Mapping[str, Any]], rules: Rules = Rules()) -> HostResult:
    """The whole rule: pods -> ``HostResult``."""
    return collect(classify(p, rules) for p in pods)


def render_lines(hosts: Iterable[Host]) -> str:
    """``host:slots`` lines, each ending in a newline; empty string for no hosts."""
    return "".join(f"{h.host}:{h.slots}\n" for h in hosts)
