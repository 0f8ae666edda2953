"""``discover-hosts --fallback api``: one LIST against the Kubernetes API. Standard library only.

Credentials: the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``; its
current context; bearer ``token``/``tokenFile`` or client certificate; ``certificate-authority``
or ``-data``; ``insecure-skip-tls-verify``), else the in-cluster service account. Pods go
through ``discovery.hosts`` (the daemon's rule). Raises ``Failure`` (no answer) or
``UsageError`` (bad settings).

kubeconfig files are YAML; the standard library has no YAML parser, so ``parse_yaml`` reads
the block-style subset kubeconfigs use (mappings, sequences, plain and quoted scalars) and
JSON; anything else is a ``UsageError`` naming the line.
"""
from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from discovery.errors import Failure, UsageError

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


# -- a YAML subset ---------------------------------------------------------------------------
def _scalar(text: str, lineno: int) -> Any:
    t = text.strip()
    if t.startswith('"'):
        try:
            return json.loads(t)
        except ValueError:
            raise ValueError(f"line {lineno}: bad double-quoted string") from None
    if t.startswith("'"):
        if not t.endswith("'") or len(t) < 2:
            raise ValueError(f"line {lineno}: bad single-quoted string")
        return t[1:-1].replace("''", "'")
    if t in ("{}", "[]"):
        return {} if t == "{}" else []
    if t[:1] in ("{", "[", "|", ">", "&", "*", "!"):
        raise ValueError(f"line {lineno}: unsupported YAML {t[:20]!r}")
    if " #" in t:
        t = t[:t.index(" #")].rstrip()
    if t in ("null", "~", ""):
        return None
    if t in ("true", "True"):
        return True
    if t in ("false", "False"):
        return False
    if t.lstrip("-").isdigit():
        return int(t)
    return t


def _split_key(text: str, lineno: int) -> tuple[str, str] | None:
    """``key: value`` -> (key, value); None if the text is not a mapping entry."""
    if text[:1] in ('"', "'"):
        q = text[0]
        end = text.find(q, 1)
        if end < 0 or text[end + 1:end + 2] != ":":
            return None
        return text[1:end], text[end + 2:].strip()
    idx = text.find(": ")
    if idx < 0:
        return (text[:-1], "") if text.endswith(":") else None
    return text[:idx], text[idx + 2:].strip()


def parse_yaml(text: str) -> Any:
    """The block-style YAML subset of kubeconfig files (or JSON) -> Python objects."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    lines: list[list[Any]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.rstrip()
        stripped = s.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        if "\t" in s[:len(s) - len(s.lstrip())]:
            raise ValueError(f"line {n}: tab in indentation")
        lines.append([len(s) - len(s.lstrip(" ")), stripped, n])
    pos = 0

    def is_item(i: int) -> bool:
        return lines[i][1] == "-" or lines[i][1].startswith("- ")

    def block(indent: int) -> Any:
        return seq(indent) if is_item(pos) else mapping(indent)

    def seq(indent: int) -> list[Any]:
        nonlocal pos
        items: list[Any] = []
        while pos < len(lines) and lines[pos][0] == indent and is_item(pos):
            content = lines[pos][1][1:].lstrip(" ")
            if not content:
                pos += 1
                if pos < len(lines) and lines[pos][0] > indent:
                    items.append(block(lines[pos][0]))
                else:
                    items.append(None)
                continue
            offset = indent + len(lines[pos][1]) - len(content)
            if _split_key(content, lines[pos][2]) is not None:
                lines[pos][0], lines[pos][1] = offset, content
                items.append(mapping(offset))
            else:
                items.append(_scalar(content, lines[pos][2]))
                pos += 1
        return items

    def mapping(indent: int) -> dict[str, Any]:
        nonlocal pos
        out: dict[str, Any] = {}
        while pos < len(lines) and lines[pos][0] == indent and not is_item(pos):
            kv = _split_key(lines[pos][1], lines[pos][2])
            if kv is None:
                raise ValueError(f"line {lines[pos][2]}: expected 'key: value'")
            key, rest = kv
            pos += 1
            if rest:
                out[key] = _scalar(rest, lines[pos - 1][2])
            elif pos < len(lines) and (lines[pos][0] > indent
                                       or (lines[pos][0] == indent and is_item(pos))):
                out[key] = block(lines[pos][0])
            else:
                out[key] = None
        if pos < len(lines) and lines[pos][0] > indent:
            raise ValueError(f"line {lines[pos][2]}: unexpected indentation")
        return out

    if not lines:
        return None
    result = block(lines[0][0])
    if pos != len(lines):
        raise ValueError(f"line {lines[pos][2]}: unexpected content")
    return result


# -- credentials -----------------------------------------------------------------------------
class _Target:
    def __init__(self) -> None:
        self.server = ""
        self.headers: dict[str, str] = {}
        self.context: ssl.SSLContext | None = None


def _named(items: Any, name: Any, what: str, path: str) -> dict[str, Any]:
    for item in items or ():
        if isinstance(item, dict) and item.get("name") == name:
            return item.get(what) or {}
    raise UsageError(f"kubeconfig {path}: no {what} named {name!r}")


def _data_file(made: list[str], data: str) -> str:
    """Write base64 ``data`` to a new temp file, record its path in ``made``, return it."""
    fd, path = tempfile.mkstemp(prefix="discover-hosts-", suffix=".pem")
    made.append(path)
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return path


def _from_kubeconfig(path: str) -> _Target:
    try:
        with open(path, encoding="utf-8") as f:
            doc = parse_yaml(f.read())
    except OSError as e:
        raise UsageError(f"kubeconfig {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"kubeconfig {path}: cannot parse: {e}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"kubeconfig {path}: not a mapping")
    ctx = _named(doc.get("contexts"), doc.get("current-context"), "context", path)
    cluster = _named(doc.get("clusters"), ctx.get("cluster"), "cluster", path)
    user = _named(doc.get("users"), ctx.get("user"), "user", path) if ctx.get("user") else {}
    base = os.path.dirname(os.path.abspath(path))
    t = _Target()
    t.server = str(cluster.get("server") or "").rstrip("/")
    if not t.server:
        raise UsageError(f"kubeconfig {path}: cluster has no server")
    if "exec" in user or "auth-provider" in user:
        raise UsageError(f"kubeconfig {path}: exec/auth-provider users are not supported by "
                         "--fallback api (use a token or a client certificate)")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        with open(os.path.join(base, user["tokenFile"])) as f:
            token = f.read().strip()
    if token:
        t.headers["Authorization"] = f"Bearer {token}"
    elif user.get("username") is not None:
        cred = base64.b64encode(f"{user['username']}:{user.get('password', '')}".encode()).decode()
        t.headers["Authorization"] = f"Basic {cred}"
    if t.server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            t.context = ssl._create_unverified_context()
        else:
            t.context = ssl.create_default_context()
            if cluster.get("certificate-authority-data"):
                t.context.load_verify_locations(
                    cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            elif cluster.get("certificate-authority"):
                t.context.load_verify_locations(os.path.join(base, cluster["certificate-authority"]))
        made: list[str] = []  # the context reads the files at once: removed before returning
        try:
            cert = (_data_file(made, user["client-certificate-data"]) if user.get("client-certificate-data")
                    else user.get("client-certificate") and os.path.join(base, user["client-certificate"]))
            key = (_data_file(made, user["client-key-data"]) if user.get("client-key-data")
                   else user.get("client-key") and os.path.join(base, user["client-key"]))
            if cert:
                t.context.load_cert_chain(cert, key or None)
        finally:
            for p in made:
                os.unlink(p)
    return t


def _in_cluster() -> _Target:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not os.path.exists(f"{SA_DIR}/token"):
        raise UsageError("no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not in a cluster")
    t = _Target()
    t.server = f"https://{'[' + host + ']' if ':' in host else host}:{port or 443}"
    with open(f"{SA_DIR}/token") as f:
        t.headers["Authorization"] = f"Bearer {f.read().strip()}"
    t.context = ssl.create_default_context(cafile=f"{SA_DIR}/ca.crt")
    return t


def target(s: dict) -> _Target:
    path = s["kubeconfig"]
    default = os.path.expanduser("~/.kube/config")
    if not path and os.path.exists(default):
        path = default
    if path:
        try:
            return _from_kubeconfig(path)
        except (OSError, ssl.SSLError, ValueError, KeyError, TypeError) as e:
            if isinstance(e, UsageError):
                raise
            raise UsageError(f"kubeconfig {path}: {e}") from None
    return _in_cluster()


def from_api(s: dict) -> bytes:
    """One LIST -> validated-by-caller ``host:slots`` body. See the module docstring."""
    from discovery.hosts import Rules, pods_to_hosts, render_lines
    if not s["selector"]:
        raise UsageError("--fallback api needs --selector (or DISCOVERY_SELECTOR)")
    try:
        rules = Rules(default_slots=int(s["default_slots"]), address=s["address"],
                      group_by=s["group_by"] or None, cluster_domain=s["cluster_domain"])
    except ValueError as e:
        raise UsageError(str(e)) from None
    if rules.group_by and not s["group"]:
        raise UsageError("--group-by needs --group (or DISCOVERY_GROUP)")
    t = target(s)
    query = urllib.parse.urlencode({"labelSelector": s["selector"]})
    ns = urllib.parse.quote(s["namespace"], safe="")
    path = f"/api/v1/namespaces/{ns}/pods" if s["namespace"] else "/api/v1/pods"
    req = urllib.request.Request(f"{t.server}{path}?{query}", headers=t.headers)
    try:
        with urllib.request.urlopen(req, timeout=s["timeout"] * 2, context=t.context) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise Failure(f"API {t.server}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise Failure(f"API {t.server} unreachable ({reason})") from None
    except ValueError as e:
        raise Failure(f"API {t.server}: malformed response: {e}") from None
    result = pods_to_hosts(doc.get("items") or [], rules)
    hosts = [h for h in result.hosts if not rules.group_by or h.group == s["group"]]
    return render_lines(hosts).encode()
