"""The three PATCH flavours of the Kubernetes API, as pure functions on JSON values.

- ``merge_patch(target, patch)``: RFC 7386 (``application/merge-patch+json``): objects merge
  recursively, ``null`` deletes a key, anything else (lists too) replaces.
- ``json_patch(target, ops)``: RFC 6902 (``application/json-patch+json``): add, remove,
  replace, move, copy, test. Raises ``Invalid`` (422) on a bad path or a failed test.
- ``strategic_merge_patch(target, patch)``: Kubernetes' strategic merge
  (``application/strategic-merge-patch+json``) for the pod lists that have a merge key
  (containers by name, conditions by type, ...) plus ``$patch: delete|replace`` and
  ``$retainKeys``-free directives; other lists replace, as in Kubernetes.
- ``apply(content_type, target, body)`` picks one by content type (415 otherwise).

None of them mutates its arguments; each returns a new value.
"""
from __future__ import annotations

import copy
import json

from .errors import BadRequest, Invalid, UnsupportedMediaType

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

# List fields of a Pod merged by key under a strategic merge patch (last path element -> key).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "conditions": "type",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "podIPs": "ip",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
# Lists of scalars merged as sets.
SET_LISTS = {"finalizers"}


def merge_patch(target, patch):
    """RFC 7386 merge of ``patch`` into ``target``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _decode_pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise Invalid(f"json patch: path {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts: list[str], path: str):
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise Invalid(f"json patch: path {path!r} not found")
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[_index(p, len(cur) - 1, path)]
            except IndexError:
                raise Invalid(f"json patch: path {path!r} not found") from None
        else:
            raise Invalid(f"json patch: path {path!r} not found")
    return cur


def _index(token: str, maximum: int, path: str) -> int:
    if token == "-":
        return maximum + 1
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise Invalid(f"json patch: bad array index {token!r} in {path!r}")
    i = int(token)
    if i > maximum:
        raise Invalid(f"json patch: array index {i} out of range in {path!r}")
    return i


def _add(doc, path: str, value):
    parts = _decode_pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), path), copy.deepcopy(value))
    else:
        raise Invalid(f"json patch: cannot add at {path!r}")
    return doc


def _remove(doc, path: str):
    parts = _decode_pointer(path)
    if not parts:
        raise Invalid("json patch: cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f"json patch: path {path!r} not found")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent) - 1, path))
    raise Invalid(f"json patch: path {path!r} not found")


def _replace(doc, path: str, value):
    parts = _decode_pointer(path)
    if not parts:
        return copy.deepcopy(value)
    _walk(doc, parts, path)  # the target must exist
    parent = _walk(doc, parts[:-1], path)
    key = parts[-1] if isinstance(parent, dict) else _index(parts[-1], len(parent) - 1, path)
    parent[key] = copy.deepcopy(value)
    return doc


def json_patch(target, ops):
    """Apply an RFC 6902 operation list to a copy of ``target``."""
    if not isinstance(ops, list):
        raise BadRequest("json patch: the body must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise Invalid(f"json patch: operation {n} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise Invalid(f"json patch: operation {n} ({kind}) needs 'value'")
        if kind == "add":
            doc = _add(doc, path, op["value"])
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _replace(doc, path, op["value"])
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise Invalid(f"json patch: operation {n} ({kind}) needs 'from'")
            value = _walk(doc, _decode_pointer(op["from"]), op["from"])
            value = copy.deepcopy(value)
            if kind == "move":
                _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _walk(doc, _decode_pointer(path), path) != op["value"]:
                raise Invalid(f"json patch: test failed at {path!r}")
        else:
            raise Invalid(f"json patch: unknown operation {kind!r}")
    return doc


def strategic_merge_patch(target, patch, field: str | None = None):
    """Kubernetes strategic merge of ``patch`` into ``target`` (for Pod objects)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            real = key.split("/", 1)[1]
            out[real] = [v for v in out.get(real) or [] if v not in (value or [])]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in SET_LISTS and isinstance(out.get(key), list):
            out[key] = list(out[key]) + [v for v in value if v not in out[key]]
        elif isinstance(value, dict):
            merged = strategic_merge_patch(out.get(key), value, key)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(current: list, patch: list, key: str) -> list:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    out = [copy.deepcopy(c) for c in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(copy.deepcopy(item))
            continue
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def apply(content_type: str, target: dict, raw: bytes) -> dict:
    """Apply the PATCH body ``raw`` of ``content_type`` to ``target``; 400/415/422 on bad input."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind not in (MERGE, JSON_PATCH, STRATEGIC):
        raise UnsupportedMediaType(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE}, {STRATEGIC} (got {kind or 'none'!r})")
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise BadRequest(f"error decoding patch: {exc}") from exc
    if kind == JSON_PATCH:
        result = json_patch(target, body)
    elif not isinstance(body, dict):
        raise BadRequest("error decoding patch: the patch must be a JSON object")
    elif kind == MERGE:
        result = merge_patch(target, body)
    else:
        result = strategic_merge_patch(target, body)
    if not isinstance(result, dict):
        raise Invalid("the patch does not leave an object")
    return result
