"""Pod dicts shaped like the API's JSON, for the pure tests (no cluster needed)."""
from __future__ import annotations

from typing import Any


def pod(name: str = "w-0", *, ns: str = "default", uid: str | None = None, phase: str = "Running",
        ready: str | None = "True", ip: str | None = "10.0.0.1", deleting: bool = False,
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        gpus: list[Any] | None = None, hostname: str | None = None, subdomain: str | None = None,
        created: str = "2026-01-01T00:00:00Z", rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}",
                            "creationTimestamp": created}
    if rv:
        meta["resourceVersion"] = rv
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    containers = []
    for g in gpus or []:
        c: dict[str, Any] = {"name": "c", "image": "x"}
        if g is not None:
            c["resources"] = {"limits": {"nvidia.com/gpu": g, "cpu": "1"}}
        containers.append(c)
    spec: dict[str, Any] = {"containers": containers or [{"name": "c", "image": "x"}]}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    if ready is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "True"},
                                {"type": "Ready", "status": ready}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
