"""``discover-hosts --fallback api``: one LIST against the Kubernetes API.

Credentials: the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``; its
current context; bearer ``token``/``tokenFile``, client certificate, or an ``exec``
credential plugin run as kubectl runs it (``exec_credential``); ``certificate-authority``
or ``-data``; ``insecure-skip-tls-verify``), else the in-cluster service account.
``auth-provider`` users are refused with a message naming the provider. Pods go through
``discovery.hosts`` (the daemon's rule). Raises ``Failure`` (no answer) or ``UsageError``
(bad settings).

A kubeconfig is JSON or YAML (any style: block or flow): JSON is read by the standard
library, YAML by PyYAML, imported on this path only (``load_kubeconfig``); the module is
otherwise standard library only, like ``discover-hosts``' fast path.
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

from discovery.environment import KUBERNETES_EXEC_INFO, KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT
from discovery.errors import Failure, UsageError

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


# -- the kubeconfig file ---------------------------------------------------------------------
def load_kubeconfig(text: str, path: str) -> Any:
    """The kubeconfig's text -> its document: JSON when it is JSON (standard library), else
    YAML read by PyYAML (``safe_load``; it comes with the ``kubernetes`` client), imported
    here only, so the rest of ``discover-hosts`` stays standard-library-only. ``UsageError``
    naming the file when it cannot be read."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML's flow style also starts with "{": PyYAML reads both
    try:
        import yaml
    except ImportError:
        raise UsageError(f"kubeconfig {path} is YAML and PyYAML is not installed (pip install pyyaml, "
                         "or give a JSON kubeconfig)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"kubeconfig {path}: cannot parse{line}: {problem}") from None


# -- exec credential plugins (client.authentication.k8s.io) ---------------------------------
EXEC_TIMEOUT = 30.0  # seconds an exec plugin may take (cloud plugins call out to a token service)
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


def exec_credential(spec: Any, cluster: dict[str, Any], base: str, path: str, timeout: float) -> dict[str, Any]:
    """Run a kubeconfig ``user.exec`` plugin as kubectl does and return its
    ``ExecCredential.status`` (``token``, or ``clientCertificateData`` + ``clientKeyData``).

    As kubectl: ``command`` with ``args``, no shell; the environment is ours plus the entries
    of ``env``; a ``command`` with a ``/`` in it is relative to the kubeconfig's directory;
    ``KUBERNETES_EXEC_INFO`` holds the ``ExecCredential`` request (not interactive; the cluster
    when ``provideClusterInfo``); stdin is closed (never interactive: a plugin with
    ``interactiveMode: Always`` is refused). The plugin has ``timeout`` seconds. A plugin that
    cannot start, or answers badly, is a ``UsageError``; one that fails (non-zero exit, its
    last stderr line quoted) or times out is a ``Failure``. Every message names the plugin."""
    import subprocess

    if not isinstance(spec, dict) or not spec.get("command"):
        raise UsageError(f"kubeconfig {path}: exec plugin without a command")
    cmd = str(spec["command"])
    name = f"exec plugin {cmd!r}"
    version = spec.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise UsageError(f"kubeconfig {path}: {name}: apiVersion {version!r} is not one of "
                         f"{', '.join(EXEC_API_VERSIONS)}")
    if spec.get("interactiveMode") == "Always":
        raise UsageError(f"kubeconfig {path}: {name} wants a terminal (interactiveMode: Always); "
                         "discover-hosts runs without one")
    if "/" in cmd and not os.path.isabs(cmd):
        cmd = os.path.join(base, cmd)
    env = dict(os.environ)
    for item in spec.get("env") or ():
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise UsageError(f"kubeconfig {path}: {name}: env entries are {{name, value}}")
        env[item["name"]] = str(item.get("value", ""))
    request: dict[str, Any] = {"apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if spec.get("provideClusterInfo"):
        fields = ("server", "tls-server-name", "insecure-skip-tls-verify", "certificate-authority-data",
                  "proxy-url", "disable-compression")
        info: dict[str, Any] = {k: cluster[k] for k in fields if k in cluster}
        for ext in cluster.get("extensions") or ():  # the plugin's own settings, as kubectl passes them
            if isinstance(ext, dict) and ext.get("name") == "client.authentication.k8s.io/exec":
                info["config"] = ext.get("extension")
        request["spec"]["cluster"] = info
    env[KUBERNETES_EXEC_INFO] = json.dumps(request)
    args = [str(a) for a in spec.get("args") or ()]
    try:
        proc = subprocess.run([cmd, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        hint = " ".join(str(spec.get("installHint") or "").split())
        raise UsageError(f"kubeconfig {path}: {name} not found" + (f" ({hint})" if hint else "")) from None
    except PermissionError:
        raise UsageError(f"kubeconfig {path}: {name} is not executable") from None
    except OSError as e:
        raise UsageError(f"kubeconfig {path}: {name} cannot start: {e.strerror or e}") from None
    except subprocess.TimeoutExpired:
        raise Failure(f"kubeconfig {path}: {name} did not answer within {timeout:g} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.decode(errors="replace").strip().splitlines() or [""])[-1][:200]
        raise Failure(f"kubeconfig {path}: {name} failed (exit {proc.returncode})" + (f": {last}" if last else ""))
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise UsageError(f"kubeconfig {path}: {name} did not print an ExecCredential (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential" or doc.get("apiVersion") != version:
        raise UsageError(f"kubeconfig {path}: {name} did not print an ExecCredential of {version}")
    status = doc.get("status")
    if not isinstance(status, dict) or not (
            isinstance(status.get("token"), str) and status["token"]
            or isinstance(status.get("clientCertificateData"), str) and isinstance(status.get("clientKeyData"), str)):
        raise UsageError(f"kubeconfig {path}: {name}'s ExecCredential has neither a token nor a client "
                         "certificate and key")
    return status


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


def _from_kubeconfig(path: str, timeout: float) -> _Target:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"kubeconfig {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"kubeconfig {path}: cannot read: {e}") from None
    doc = load_kubeconfig(text, path)
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
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name") if isinstance(user["auth-provider"], dict) else None
        raise UsageError(f"kubeconfig {path}: auth-provider {provider!r} is not supported by --fallback api "
                         "(kubectl dropped these too: use its exec plugin, a token or a client certificate)")
    if user.get("exec"):
        status = exec_credential(user["exec"], cluster, base, path, timeout)
        user = {"token": status["token"]} if status.get("token") else {
            "client-certificate-data": base64.b64encode(status["clientCertificateData"].encode()).decode(),
            "client-key-data": base64.b64encode(status["clientKeyData"].encode()).decode()}
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
    host, port = os.environ.get(KUBERNETES_SERVICE_HOST), os.environ.get(KUBERNETES_SERVICE_PORT)
    if not host or not os.path.exists(f"{SA_DIR}/token"):
        raise UsageError("no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not in a cluster")
    t = _Target()
    t.server = f"https://{'[' + host + ']' if ':' in host else host}:{port or 443}"
    with open(f"{SA_DIR}/token") as f:
        t.headers["Authorization"] = f"Bearer {f.read().strip()}"
    t.context = ssl.create_default_context(cafile=f"{SA_DIR}/ca.crt")
    return t


def target(s: dict) -> _Target:
    """Where and how to ask the API: the kubeconfig's (see the module docstring), else in-cluster."""
    path = s["kubeconfig"]
    default = os.path.expanduser("~/.kube/config")
    if not path and os.path.exists(default):
        path = default
    if path:
        try:
            return _from_kubeconfig(path, max(EXEC_TIMEOUT, float(s["timeout"])))
        except (OSError, ssl.SSLError, ValueError, KeyError, TypeError, AttributeError) as e:
            if isinstance(e, (UsageError, Failure)):
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
