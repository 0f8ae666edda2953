"""Render deploy/ kustomizations with kubectl (``kubectl kustomize``), as a user would."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def kubectl() -> str:
    """The kubectl binary; the deploy tests need it (no skip)."""
    found = shutil.which("kubectl")
    assert found, "kubectl is needed to render deploy/ (kubectl kustomize)"
    return found


def render(directory: Path) -> list[dict]:
    """The objects ``kubectl kustomize directory`` makes; fails the test on a kustomize error."""
    proc = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {directory}: {proc.stderr}"
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert docs, f"kubectl kustomize {directory} rendered nothing"
    return docs


def by_kind(objects: list, kind: str) -> list:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list, kind: str, name: str | None = None) -> dict:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_spec(obj: dict) -> dict:
    """The pod spec of a Pod, of a PodTemplate, or of the template of a workload (Job, ReplicaSet...)."""
    if obj["kind"] == "Pod":
        return obj["spec"]
    return obj["template"]["spec"] if obj["kind"] == "PodTemplate" else obj["spec"]["template"]["spec"]


# what the Job controller sets on a Job (and adds to its pods' labels) when it is created
JOB_UID = "5d1b7e0c-3f4a-4b8e-9c2d-1a2b3c4d5e6f"
# a pod's own uid (``metadata.uid``), as the API server gives it
POD_UID = "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d"


def worker_set(objects: list) -> dict:
    """The workers' ReplicaSet as the launcher pod's worker-start makes it from the rendered
    PodTemplate (``elastic.scaler.scale_workers.new_workload``): owned by the rendered Job
    (uid ``JOB_UID``), with the worker-start's ``--replicas``. deploy/ holds no ReplicaSet."""
    from elastic.scaler.scale_workers import new_workload, owner_reference, pod_template

    template, job = one(objects, "PodTemplate"), one(objects, "Job")
    start = container(pod_spec(job), "worker-start")
    replicas = int(next(a.split("=", 1)[1] for a in start["args"] if a.startswith("--replicas=")))
    name = template["metadata"]["name"]
    owner = owner_reference({"metadata": {"name": job["metadata"]["name"], "uid": JOB_UID}})
    made = new_workload("replicasets", name, pod_template(template, name), owner, replicas)
    made["metadata"]["namespace"] = template["metadata"]["namespace"]
    return made


def pod_labels(obj: dict) -> dict:
    """The labels of the pods ``obj`` makes; a Job's include those its controller adds."""
    if obj["kind"] == "Pod":
        return obj["metadata"]["labels"]
    if obj["kind"] == "PodTemplate":
        return obj["template"]["metadata"]["labels"]
    labels = dict(obj["spec"]["template"]["metadata"]["labels"])
    if obj["kind"] == "Job":
        name = obj["metadata"]["name"]
        labels.update({"batch.kubernetes.io/job-name": name, "job-name": name,
                       "batch.kubernetes.io/controller-uid": JOB_UID, "controller-uid": JOB_UID})
    return labels


def all_containers(spec: dict) -> list[dict]:
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def container(spec: dict, name: str) -> dict:
    found = [c for c in all_containers(spec) if c["name"] == name]
    assert len(found) == 1, f"no container {name} in {[c['name'] for c in all_containers(spec)]}"
    return found[0]


def env(container_: dict) -> dict:
    """Plain env values (valueFrom entries map to None)."""
    return {e["name"]: e.get("value") for e in container_.get("env", [])}


def config_maps(objects: list) -> dict:
    """The rendered ConfigMaps' data, by name."""
    return {o["metadata"]["name"]: o.get("data", {}) for o in by_kind(objects, "ConfigMap")}


def expand(text: str, container_: dict, pod_labels_: dict, config_maps_: dict | None = None, *,
           pod_name: str | None = None, namespace: str | None = None) -> str:
    """``$(VAR)`` expanded as the kubelet does, for ``envFrom`` ConfigMaps (from
    ``config_maps_``, by name; a missing one fails), then env values and fieldRefs to pod
    labels, the pod's uid (``POD_UID``) and, when given, the pod's name and namespace."""
    values = {}
    for source in container_.get("envFrom", []):
        values.update((config_maps_ or {})[source["configMapRef"]["name"]])
    for e in container_.get("env", []):
        if "value" in e:
            value = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path.startswith("metadata.labels['"):
                value = pod_labels_[path[len("metadata.labels['"):-2]]
            elif path == "metadata.uid":
                value = POD_UID
            elif path == "metadata.name" and pod_name is not None:
                value = pod_name
            elif path == "metadata.namespace" and namespace is not None:
                value = namespace
            else:
                continue
        for name, known in values.items():
            value = value.replace(f"$({name})", known)
        values[e["name"]] = value
    for name, value in values.items():
        text = text.replace(f"$({name})", value)
    return text


def parse_selector(selector: str) -> dict:
    return dict(term.split("=", 1) for term in selector.split(","))


def quantity(text: str) -> float:
    """A Kubernetes quantity (``500m``, ``4Gi``, ``12``) as a number: CPUs or bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}
    for unit, factor in units.items():
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def flag(argv: list, name: str) -> str:
    """The value of ``name`` in argv (``--name=value`` or ``--name value``), given once."""
    found = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    found += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]
    assert len(found) == 1, f"{name} {'missing from' if not found else 'given twice in'} {argv}"
    return found[0]
