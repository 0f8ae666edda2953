"""Pod rules of the API server (pure): defaults on create, validation, update limits, tables.

- ``prepare_new(body, namespace, now, uid, suffix)`` checks a create body and returns the pod
  to store: metadata (uid, creationTimestamp, generateName), spec defaults, status Pending.
- ``merge_update(old, new, subresource)`` returns what a replace or patch stores: on the main
  resource the status is kept from ``old``; on ``status`` only the status is taken from ``new``.
  Raises Invalid when the update changes what Kubernetes forbids changing.
- ``table(pods, now, include)`` renders kubectl's server-side ``Table`` for pods.
- ``age(timestamp, now)`` is kubectl's short duration ("5s", "3m", "2d").

Errors: BadRequest (400) for the wrong kind or namespace, Invalid (422) for rule violations.
"""
from __future__ import annotations

import copy
import re
from datetime import datetime, timezone

from .errors import BadRequest, Invalid

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

# Spec fields an update may change (Kubernetes: image, activeDeadlineSeconds, tolerations,
# terminationGracePeriodSeconds, schedulingGates); everything else is immutable.
_MUTABLE_SPEC = {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"}


def rfc3339(moment: datetime) -> str:
    """``2026-01-02T03:04:05Z`` (seconds, UTC), the format Kubernetes uses."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _invalid(name: str, field: str, why: str) -> Invalid:
    return Invalid(f'Pod "{name}" is invalid: {field}: {why}', name=name or None)


def _check_labels(name: str, field: str, mapping, values: bool) -> None:
    if mapping is None:
        return
    if not isinstance(mapping, dict):
        raise _invalid(name, field, "must be a map of strings")
    for key, value in mapping.items():
        prefix, _, short = key.rpartition("/")
        if (prefix and not _SUBDOMAIN.match(prefix)) or len(short) > 63 or not _QUALIFIED.match(short):
            raise _invalid(name, f"{field}", f"Invalid value: {key!r}: name part must consist of "
                           "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                           "alphanumeric character")
        if not isinstance(value, str):
            raise _invalid(name, f"{field}[{key}]", "must be a string")
        if values and (len(value) > 63 or not _LABEL_VALUE.match(value)):
            raise _invalid(name, f"{field}[{key}]", f"Invalid value: {value!r}: a valid label must be "
                           "an empty string or consist of alphanumeric characters, '-', '_' or '.'")


def check_body(body, namespace: str) -> dict:
    """Common checks of a Pod body sent to ``namespace``; returns it. 400 or 422 on failure."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object (a Pod)")
    if body.get("kind") not in (None, "Pod") or body.get("apiVersion") not in (None, "v1"):
        raise BadRequest(f"the body is a {body.get('apiVersion')}/{body.get('kind')}, expected v1/Pod")
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        raise Invalid("Pod is invalid: metadata: Required value")
    if meta.get("namespace") not in (None, "", namespace):
        raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
    name = meta.get("name") or ""
    _check_labels(name, "metadata.labels", meta.get("labels"), values=True)
    _check_labels(name, "metadata.annotations", meta.get("annotations"), values=False)
    spec = body.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(name, "spec", "Required value")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _invalid(name, "spec.containers", "Required value")
    seen = set()
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            raise _invalid(name, f"spec.containers[{i}].name", "Required value")
        if not _LABEL.match(c["name"]):
            raise _invalid(name, f"spec.containers[{i}].name", f"Invalid value: {c['name']!r}")
        if c["name"] in seen:
            raise _invalid(name, f"spec.containers[{i}].name", f"Duplicate value: {c['name']!r}")
        seen.add(c["name"])
        if not c.get("image"):
            raise _invalid(name, f"spec.containers[{i}].image", "Required value")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool) or grace < 0):
        raise _invalid(name, "spec.terminationGracePeriodSeconds", f"Invalid value: {grace!r}: must be >= 0")
    return body


def prepare_new(body, namespace: str, now: datetime, uid: str, suffix: str) -> dict:
    """The pod to store for a create request (``suffix`` completes a generateName)."""
    body = copy.deepcopy(check_body(body, namespace))
    meta = body["metadata"]
    if not meta.get("name"):
        if not meta.get("generateName"):
            raise Invalid('Pod is invalid: metadata.name: Required value: name or generateName is required')
        meta["name"] = meta["generateName"] + suffix
    name = meta["name"]
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        raise _invalid(name, "metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain "
                       "must consist of lower case alphanumeric characters, '-' or '.', and must start "
                       "and end with an alphanumeric character")
    for server_field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(server_field, None)
    meta.update(namespace=namespace, uid=uid, creationTimestamp=rfc3339(now))
    meta.setdefault("labels", {})
    if not meta["labels"]:
        del meta["labels"]
    spec = body["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    for c in spec["containers"]:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})
    body["kind"], body["apiVersion"] = "Pod", "v1"
    body["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    if spec.get("nodeName"):
        body["status"]["conditions"] = [condition("PodScheduled", True, now)]
    return body


def qos_class(spec: dict) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers", [])]
    if not any(r.get("limits") or r.get("requests") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k) and (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k))
        == (r.get("limits") or {}).get(k) for r in resources for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


def condition(kind: str, ok: bool, now: datetime, reason: str | None = None) -> dict:
    cond = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
            "lastTransitionTime": rfc3339(now)}
    if reason:
        cond["reason"] = reason
    return cond


def merge_update(old: dict, new: dict, subresource: str | None) -> dict:
    """What an update of ``old`` to ``new`` stores (main resource or ``status``); 422 if forbidden."""
    if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
        raise Invalid("Pod is invalid: metadata: Required value")
    name = old["metadata"]["name"]
    if new["metadata"].get("name", name) != name:
        raise BadRequest(f'the name of the object ({new["metadata"].get("name")}) '
                         f'does not match the name on the URL ({name})')
    if new.get("kind", "Pod") != "Pod":
        raise BadRequest(f"the body is a {new.get('kind')}, expected Pod")
    out = copy.deepcopy(old)
    if subresource == "status":
        out["status"] = copy.deepcopy(new.get("status") or {})
        return out
    check_body(new, old["metadata"]["namespace"])
    _check_spec_change(name, old["spec"], new["spec"])
    meta = copy.deepcopy(new["metadata"])
    for kept in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "generateName", "resourceVersion"):
        if kept in old["metadata"]:
            meta[kept] = old["metadata"][kept]
        else:
            meta.pop(kept, None)
    if old["metadata"].get("deletionTimestamp") and len(meta.get("finalizers") or []) > len(
            old["metadata"].get("finalizers") or []):
        raise Invalid(f'Pod "{name}" is invalid: metadata.finalizers: Forbidden: no new finalizers '
                      "can be added if the object is being deleted", name=name)
    out["metadata"] = meta
    out["spec"] = copy.deepcopy(new["spec"])
    return out


def _check_spec_change(name: str, old: dict, new: dict) -> None:
    def comparable(spec: dict) -> dict:
        spec = {k: v for k, v in spec.items() if k not in _MUTABLE_SPEC}
        for key in ("containers", "initContainers"):
            if key in spec:
                spec[key] = [{k: v for k, v in c.items() if k != "image"} for c in spec[key]]
        return spec

    if old.get("nodeName") and not new.get("nodeName"):
        new = dict(new, nodeName=old["nodeName"])
    if comparable(old) != comparable(new):
        raise Invalid(f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields '
                      "other than `spec.containers[*].image`, `spec.initContainers[*].image`, "
                      "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                      "tolerations), `spec.terminationGracePeriodSeconds`", name=name)


def is_ready(pod: dict) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def age(timestamp: str | None, now: datetime) -> str:
    """kubectl's short human duration since ``timestamp``."""
    if not timestamp:
        return "<unknown>"
    seconds = max(0, int((now - parse_time(timestamp)).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def display_status(pod: dict) -> str:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return waiting["reason"]
    return status.get("reason") or status.get("phase") or "Unknown"


_COLUMNS = [
    ("Name", "string", "name", 0),
    ("Ready", "string", "", 0),
    ("Status", "string", "", 0),
    ("Restarts", "string", "", 0),
    ("Age", "string", "", 0),
    ("IP", "string", "", 1),
    ("Node", "string", "", 1),
    ("Nominated Node", "string", "", 1),
    ("Readiness Gates", "string", "", 1),
]


def table(pods: list[dict], now: datetime, include: str = "Metadata", resource_version: str = "") -> dict:
    """kubectl's server-side Table (meta.k8s.io/v1) for ``pods``; ``include`` is
    ``includeObject``: None, Metadata (default) or Object."""
    rows = []
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        statuses = status.get("containerStatuses") or []
        ready = sum(1 for s in statuses if s.get("ready"))
        restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
        row: dict[str, object] = {"cells": [pod["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}",
                         display_status(pod), str(restarts), age(pod["metadata"].get("creationTimestamp"), now),
                         status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
                         status.get("nominatedNodeName") or "<none>", "<none>"]}
        if include == "Object":
            row["object"] = pod
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": pod["metadata"]}
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": n, "type": t, "format": f, "description": n, "priority": p} for n, t, f, p in _COLUMNS],
        "rows": rows,
    }


def running_status(pod: dict, ip: str, host_ip: str, now: datetime, started: datetime) -> dict:
    """The status a kubelet reports once the pod's sshd answers: Running, Ready, podIP."""
    ts = rfc3339(started)
    status = copy.deepcopy(pod.get("status") or {})
    status.update(
        phase="Running", hostIP=host_ip, hostIPs=[{"ip": host_ip}], podIP=ip, podIPs=[{"ip": ip}], startTime=ts,
        conditions=[condition("PodReadyToStartContainers", True, now), condition("Initialized", True, now),
                    condition("Ready", True, now), condition("ContainersReady", True, now),
                    condition("PodScheduled", True, now)],
        containerStatuses=[
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True, "started": True,
             "restartCount": 0, "containerID": f"localcluster://{pod['metadata']['uid']}/{c['name']}",
             "state": {"running": {"startedAt": ts}}}
            for c in pod["spec"].get("containers") or []])
    return status


def failed_status(pod: dict, message: str, now: datetime, exit_code: int | None) -> dict:
    """The status of a pod whose host stopped on its own: Failed, not Ready."""
    status = copy.deepcopy(pod.get("status") or {})
    status.update(phase="Failed", message=message, reason="Error",
                  conditions=[condition("Ready", False, now, "PodFailed"),
                              condition("ContainersReady", False, now, "PodFailed"),
                              condition("PodScheduled", True, now)],
                  containerStatuses=[
                      {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                       "started": False, "restartCount": 0,
                       "state": {"terminated": {"exitCode": exit_code if exit_code is not None else 1,
                                                "reason": "Error", "message": message,
                                                "finishedAt": rfc3339(now)}}}
                      for c in pod["spec"].get("containers") or []])
    return status


# Known fields, for ``fieldValidation`` (checked to the container level, as far as a Pod goes).
_POD_FIELDS = {"apiVersion", "kind", "metadata", "spec", "status"}
_META_FIELDS = {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
                "ownerReferences", "finalizers", "managedFields"}
_SPEC_FIELDS = {"activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig",
                "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork",
                "hostPID", "hostUsers", "hostname", "imagePullSecrets", "initContainers", "nodeName",
                "nodeSelector", "os", "overhead", "preemptionPolicy", "priority", "priorityClassName",
                "readinessGates", "resourceClaims", "resources", "restartPolicy", "runtimeClassName",
                "schedulerName", "schedulingGates", "securityContext", "serviceAccount", "serviceAccountName",
                "setHostnameAsFQDN", "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds",
                "tolerations", "topologySpreadConstraints", "volumes"}
_CONTAINER_FIELDS = {"args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe",
                     "name", "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy",
                     "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath",
                     "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir"}


def unknown_fields(body) -> list[str]:
    """Paths of fields a Pod does not have (``spec.containers[0].imagee``), for fieldValidation."""
    if not isinstance(body, dict):
        return []
    out = [k for k in body if k not in _POD_FIELDS]
    meta, spec = body.get("metadata"), body.get("spec")
    if isinstance(meta, dict):
        out += [f"metadata.{k}" for k in meta if k not in _META_FIELDS]
    if isinstance(spec, dict):
        out += [f"spec.{k}" for k in spec if k not in _SPEC_FIELDS and not k.startswith("$")]
        for key in ("containers", "initContainers"):
            for i, c in enumerate(spec.get(key) or []):
                if isinstance(c, dict):
                    out += [f"spec.{key}[{i}].{k}" for k in c if k not in _CONTAINER_FIELDS and not k.startswith("$")]
    return out
