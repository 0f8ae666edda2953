"""The pure rule: pods (dicts as the Kubernetes API returns them, parsed JSON) -> Horovod hosts.

Standard library only, no I/O, no clock: ``discover-hosts --fallback api`` imports it too.

A pod is a host when it is ``Running``, its ``Ready`` condition is ``True``, it has no
``deletionTimestamp`` and it has a ``podIP``. Anything else is *waiting*, counted by reason:
``not scheduled`` (no node yet: the pool is full or still growing), ``not running`` (on a node,
starting), ``not ready``, ``no pod IP``, ``terminating``, and ``failing`` (on a node, but a
container crash-loops or cannot start: ``CrashLoopBackOff``, an image pull error, a bad
container config; or the pod ``Failed``). A waiting pod's ``detail`` says more where the API
does (the scheduler's message, the container's state, restarts, last exit), cut to
``DETAIL_CHARS`` printable characters: the launcher tells a lack of capacity from failing
workers by them (``elastic.launch.shortfall``). A pod that would be a host but whose settings
are wrong (bad slots annotation, bad GPU limit, no usable address) is *skipped* with a reason,
never a crash.

Slots: the annotation ``elastic-horovod/slots`` (a positive integer), else the sum of the
containers' ``nvidia.com/gpu`` limits when positive, else ``default_slots``.

Address (``Rules.address``):

- ``ip``   the pod IP (a recreated pod gets a new address, so Horovod's blacklist of the
  old incarnation does not shut it out). Horovod splits ``host:slots`` on ``:``, so for an
  IPv6 pod IP the pod's DNS name is served instead, or the pod is skipped if it has none.
- ``dns``  ``<spec.hostname>.<spec.subdomain>.<namespace>.svc.<cluster_domain>`` (a headless
  service); pods without hostname and subdomain are skipped.
- ``name`` the pod name.

Every served host passes ``check_host`` (``check_ip``/``check_dns_name``): an IPv4 literal
in canonical form in mode ``ip`` (the pod IP itself is checked in every mode), an RFC 1123
DNS name in modes ``dns``/``name``. A pod whose field fails is *skipped* with the reason
``bad address in <field>: <value escaped> (<why>)``: whoever can patch a pod's status must
not be able to put shell syntax, an option or a line break into horovodrun's ssh command.

Order is stable: by creation time, then namespace, then name, so hosts that joined earlier
keep their place when others join.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from discovery.errors import BadHost
from shared.discovery_wire import (
    WAIT_FAILING,
    WAIT_NO_GROUP,
    WAIT_NO_IP,
    WAIT_NOT_READY,
    WAIT_NOT_RUNNING,
    WAIT_NOT_SCHEDULED,
    WAIT_TERMINATING,
)
from shared.hosts import MAX_SLOTS, host_ok, host_problem

if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterable, Mapping

SLOTS_ANNOTATION = "elastic-horovod/slots"
GPU_RESOURCE = "nvidia.com/gpu"
ADDRESS_MODES = ("ip", "dns", "name")

# Reasons a pod is waiting (not yet or no longer a host): ``shared.discovery_wire``'s WAIT_*.

# A container waiting for one of these reasons will not start by itself: the pod is failing.
FAILING_CONTAINER_REASONS = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreStartHookError",
    "PostStartHookError",
})
DETAIL_CHARS = 200

_SHOWN = 80  # characters of a bad value quoted in a reason


def escape(value: Any) -> str:
    """A hostile value made safe for a log line or a reason: ``repr`` (control characters,
    line breaks and non-printable code points escaped), cut to a readable length."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    if len(value) > _SHOWN:
        return f"{value[:_SHOWN]!r}...({len(value)} chars)"
    return repr(value)


def check_ip(value: Any) -> str:
    """An IP address literal -> its canonical text; ``BadHost`` otherwise.

    IPv4 or IPv6 as ``ipaddress`` reads them (no leading zeros, no zone/scope ``%eth0``), not
    unspecified, ``0.0.0.0/8``, multicast or reserved (``255.255.255.255``: nothing to ssh to);
    for IPv4 this is ``shared.hosts.host_ok``'s rule (a test holds them together).
    """
    if not isinstance(value, str) or not value:
        raise BadHost("not an IP address")
    if not value.isascii() or "%" in value:
        raise BadHost("not an IP address literal (non-ASCII or scoped)")
    try:
        addr = ipaddress.ip_address(value)
    except ValueError:
        raise BadHost("not an IP address literal") from None
    if (addr.is_unspecified or addr.is_multicast or (addr.version == 4 and addr.is_reserved)
            or (addr.version == 4 and int(addr) >> 24 == 0)):
        raise BadHost("unspecified, 0.0.0.0/8, multicast or reserved address")
    return str(addr)


def check_dns_name(value: Any) -> str:
    """An RFC 1123 host name (``shared.hosts``' rule, and a last label that is not all digits,
    so no resolver reads it as a number) -> the name; ``BadHost`` otherwise."""
    problem = host_problem(value)
    if problem is not None:
        raise BadHost(problem)
    if value.rsplit(".", 1)[-1].isdigit():
        raise BadHost("all-numeric last label (would read as an address)")
    return value


def check_host(value: Any, address: str = "ip") -> str:
    """A value about to be served as a host in address mode ``address`` -> its canonical
    form; ``BadHost`` otherwise. Mode ``ip``: an IPv4 literal (Horovod's ``host:slots`` has
    no room for an IPv6 one); ``dns``/``name``: an RFC 1123 name."""
    if address == "ip":
        canonical = check_ip(value)
        if ":" in canonical:
            raise BadHost("IPv6 literal (Horovod's host:slots cannot carry it)")
        return canonical
    return check_dns_name(value)


def servable(value: Any) -> bool:
    """Whether ``value`` may be served or passed to a command as a host: an IPv4 literal in
    canonical form or an RFC 1123 name -- ``shared.hosts.host_ok``, the one rule every
    consumer (``discover-hosts``, ``elastic``) applies."""
    return host_ok(value)


def bad_address(field_name: str, value: Any, why: BadHost) -> str:
    """The skip reason for a bad host value: the field, the value escaped, the cause."""
    return f"bad address in {field_name}: {escape(value)} ({why})"


@dataclass(frozen=True)
class Rules:
    """How pods become hosts. Checked on construction; the bad value is in the message."""

    default_slots: int = 1
    address: str = "ip"
    group_by: str | None = None
    cluster_domain: str = "cluster.local"

    def __post_init__(self) -> None:
        if not isinstance(self.default_slots, int) or not 1 <= self.default_slots <= MAX_SLOTS:
            raise ValueError(f"default slots must be an integer in 1..{MAX_SLOTS}, got {self.default_slots!r}")
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
    group: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Waiting:
    """A pod that is not (yet, or any more) a host: ``reason`` one of the ``WAIT_*`` values,
    ``detail`` what the API says about it (printable, at most ``DETAIL_CHARS``; may be empty)."""

    namespace: str
    pod: str
    uid: str
    reason: str
    group: str | None = field(default=None, compare=False)
    detail: str = ""


Verdict = Host | Skipped | Waiting


@dataclass(frozen=True)
class HostResult:
    """``hosts`` in stable order, ``skipped`` pods with reasons, ``waiting`` counts by reason,
    ``waiting_pods`` the pods behind those counts, ``groups``: every group label value a
    selected pod carries (hosts, skipped or waiting)."""

    hosts: tuple[Host, ...]
    skipped: tuple[Skipped, ...]
    waiting: Mapping[str, int]
    groups: frozenset[str] = frozenset()
    waiting_pods: tuple[Waiting, ...] = ()  # the pods counted in ``waiting``, sorted


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
    if n < 1 or n > MAX_SLOTS:
        raise ValueError(f"out of range 1..{MAX_SLOTS}: {value!r}")
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
    if not hostname or not subdomain or not isinstance(hostname, str) or not isinstance(subdomain, str):
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
    group = None
    if rules.group_by is not None:
        labels = meta.get("labels")
        value = labels.get(rules.group_by) if isinstance(labels, dict) else None
        group = value if isinstance(value, str) and value else None

    if meta.get("deletionTimestamp"):
        return Waiting(namespace, name, uid, WAIT_TERMINATING, group)
    phase = _get(status, "phase")
    conditions = _get(status, "conditions")
    conditions = [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []
    if phase != "Running":
        if phase == "Failed":
            return Waiting(namespace, name, uid, WAIT_FAILING, group,
                           _detail("pod Failed", _get(status, "reason"), _get(status, "message"),
                                   container_state(status)))
        if phase != "Succeeded" and not _scheduled(pod, conditions):
            sched: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
            return Waiting(namespace, name, uid, WAIT_NOT_SCHEDULED, group,
                           _detail(sched.get("reason"), sched.get("message")))
        failing = failing_container(status)
        if failing:
            return Waiting(namespace, name, uid, WAIT_FAILING, group, failing)
        return Waiting(namespace, name, uid, WAIT_NOT_RUNNING, group, _detail(container_state(status)))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if not ready:
        failing = failing_container(status)
        if failing:
            return Waiting(namespace, name, uid, WAIT_FAILING, group, failing)
        return Waiting(namespace, name, uid, WAIT_NOT_READY, group, _detail(container_state(status)))
    raw_ip = _get(status, "podIP")
    if not raw_ip:
        return Waiting(namespace, name, uid, WAIT_NO_IP, group)
    try:
        ip = check_ip(raw_ip)
    except BadHost as e:
        return Skipped(namespace, name, uid, bad_address("status.podIP", raw_ip, e), group)

    if rules.group_by is not None and group is None:
        return Waiting(namespace, name, uid, WAIT_NO_GROUP)

    annotations = meta.get("annotations")
    raw = annotations.get(SLOTS_ANNOTATION) if isinstance(annotations, dict) else None
    if raw is not None:
        try:
            slots = parse_slots(raw)
        except ValueError as e:
            return Skipped(namespace, name, uid, f"bad annotation {SLOTS_ANNOTATION}: {e}", group)
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
                return Skipped(namespace, name, uid, f"bad {GPU_RESOURCE} limit: {e}", group)
        slots = gpus if gpus > 0 else rules.default_slots
        if slots > MAX_SLOTS:
            return Skipped(namespace, name, uid,
                           f"bad {GPU_RESOURCE} limit: {slots} slots, more than {MAX_SLOTS}", group)

    host: str | None
    if rules.address == "name":
        host, where = name, "metadata.name"
    elif rules.address == "dns" or ":" in ip:
        host, where = _dns_name(pod, namespace, rules), "spec.hostname/spec.subdomain"
        if host is None:
            why = "IPv6 pod IP needs a DNS name" if rules.address == "ip" else "--address dns"
            return Skipped(namespace, name, uid,
                           f"{why}: pod has no spec.hostname and spec.subdomain", group)
    else:
        host, where = ip, "status.podIP"
    try:
        host = check_host(host, "ip" if where == "status.podIP" else "dns")
    except BadHost as e:
        return Skipped(namespace, name, uid, bad_address(where, host, e), group)
    return Host(created=str(meta.get("creationTimestamp") or ""), namespace=namespace, pod=name,
                host=host, slots=slots, uid=uid, ip=ip, group=group)


def _scheduled(pod: Mapping[str, Any], conditions: list[dict[str, Any]]) -> bool:
    """On a node: ``spec.nodeName`` set, or the ``PodScheduled`` condition ``True``."""
    return bool(_get(pod, "spec", "nodeName")) or any(
        c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions)


def _detail(*parts: Any) -> str:
    """The non-empty string parts joined with ``: ``, printable, cut to ``DETAIL_CHARS``."""
    text = ": ".join(p for p in parts if isinstance(p, str) and p)
    text = "".join(c if c.isprintable() else " " for c in text)
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 3] + "..."


def _statuses(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        items = status.get(key) if isinstance(status, dict) else None
        found += [s for s in items if isinstance(s, dict)] if isinstance(items, list) else []
    return found


def _restarts(cs: Mapping[str, Any]) -> int:
    n = cs.get("restartCount")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _last_exit(cs: Mapping[str, Any]) -> str:
    last = _get(cs, "lastState", "terminated") or _get(cs, "state", "terminated")
    if not isinstance(last, dict):
        return ""
    code = last.get("exitCode")
    reason = last.get("reason")
    text = f"last exit {code}" if isinstance(code, int) and not isinstance(code, bool) else ""
    return f"{text} ({reason})" if text and isinstance(reason, str) and reason else text


def failing_container(status: Mapping[str, Any]) -> str:
    """The detail of the first container (init containers first) waiting for a reason in
    ``FAILING_CONTAINER_REASONS`` (name, reason, restarts, last exit, message), else ``""``. Pure."""
    for cs in _statuses(status):
        waiting = _get(cs, "state", "waiting")
        reason = waiting.get("reason") if isinstance(waiting, dict) else None
        if reason in FAILING_CONTAINER_REASONS:
            restarts = _restarts(cs)
            facts = ", ".join(f for f in (f"{restarts} restarts" if restarts else "", _last_exit(cs)) if f)
            name = cs.get("name") if isinstance(cs.get("name"), str) else "?"
            return _detail(f"container {name} {reason}" + (f" ({facts})" if facts else ""), waiting.get("message"))
    return ""


def container_state(status: Mapping[str, Any]) -> str:
    """A short account of the containers that are not ready (waiting reason, restarts), for a
    pod that is starting or not ready; ``""`` when there is nothing to say. Pure."""
    parts: list[str] = []
    for cs in _statuses(status):
        if cs.get("ready") is True:
            continue
        waiting = _get(cs, "state", "waiting")
        reason = waiting.get("reason") if isinstance(waiting, dict) else None
        restarts = _restarts(cs)
        facts = ", ".join(f for f in (reason if isinstance(reason, str) else "",
                                      f"{restarts} restarts" if restarts else "") if f)
        if facts:
            parts.append(f"container {cs.get('name')} {facts}")
    return _detail("; ".join(parts))


def collect(verdicts: Iterable[Verdict]) -> HostResult:
    """Verdicts -> ``HostResult``: hosts sorted stably, skipped sorted, waiting counted.

    Two pods that map to the same host string (e.g. ``--address name`` across namespaces)
    would be one host to Horovod: the later one is skipped with a reason.
    """
    hosts: list[Host] = []
    skipped: list[Skipped] = []
    waiting: dict[str, int] = {}
    groups: set[str] = set()
    waiting_pods: list[Waiting] = []
    for v in verdicts:
        if v.group is not None:
            groups.add(v.group)
        if isinstance(v, Host):
            hosts.append(v)
        elif isinstance(v, Skipped):
            skipped.append(v)
        else:
            waiting[v.reason] = waiting.get(v.reason, 0) + 1
            waiting_pods.append(v)
    hosts.sort(key=lambda h: (h.created, h.namespace, h.pod))
    seen: set[tuple[str | None, str]] = set()
    unique: list[Host] = []
    for h in hosts:
        key = (h.group, h.host)
        if key in seen:
            skipped.append(Skipped(h.namespace, h.pod, h.uid, f"duplicate host {h.host!r}", h.group))
            continue
        seen.add(key)
        unique.append(h)
    skipped.sort(key=lambda s: (s.namespace, s.pod))
    waiting_pods.sort(key=lambda w: (w.namespace, w.pod))
    return HostResult(tuple(unique), tuple(skipped), waiting, frozenset(groups), tuple(waiting_pods))


def pods_to_hosts(pods: Iterable[Mapping[str, Any]], rules: Rules = Rules()) -> HostResult:
    """The whole rule: pods -> ``HostResult``."""
    return collect(classify(p, rules) for p in pods)


def render_lines(hosts: Iterable[Host]) -> str:
    """``host:slots`` lines, each ending in a newline; empty string for no hosts.

    Checks each host again and leaves out one that fails (``classify`` reports those): nothing
    renders a value that was not validated, whoever built the ``Host``."""
    return "".join(f"{h.host}:{h.slots}\n" for h in hosts if servable(h.host) and 0 < h.slots <= MAX_SLOTS)
