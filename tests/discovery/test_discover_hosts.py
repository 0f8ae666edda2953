"""``discover-hosts``: stdout is the host list and nothing else; fallbacks; exit codes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from discovery.discover_api import load_kubeconfig
from discovery.discover_hosts import parse_args, split_url, validate
from discovery.errors import Failure, UsageError
from tests.daemons import ROOT, SELECTOR, daemon_env, fake_pod


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "discovery.discover_hosts", *args], capture_output=True,
                          text=True, env=daemon_env(env), cwd=ROOT, timeout=60)


# -- pure parts ------------------------------------------------------------------------------
@pytest.mark.parametrize("url,expected", [
    ("http://127.0.0.1:8642", ("tcp", ("127.0.0.1", 8642), "")),
    ("http://localhost:1/prefix/", ("tcp", ("localhost", 1), "/prefix")),
    ("http://[::1]:99", ("tcp", ("::1", 99), "")),
    ("unix:/run/d.sock", ("unix", "/run/d.sock", "")),
    ("unix:///run/d.sock", ("unix", "/run/d.sock", "")),
])
def test_split_url(url: str, expected: tuple) -> None:
    assert split_url(url) == expected


@pytest.mark.parametrize("url", ["https://x:1", "http://:1", "http://h:port", "unix:", "ftp://h"])
def test_bad_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError, match="DISCOVERY_URL"):
        split_url(url)


@pytest.mark.parametrize("body", [b"10.0.0.1:1\n10.0.0.2", b"10.0.0.1:1", b"\xff:1\n"])
def test_partial_answers_are_refused(body: bytes) -> None:
    with pytest.raises(Failure, match="^test: answer (is not UTF-8|does not end with a newline)"):
        validate(body, "test")


@pytest.mark.parametrize("line", [
    b"10.0.0.1", b"fd00::1:2", b"h:0", b"h:x", b":1", b"h:1025", b"h:99999999999999999999",
    b"h:\xc2\xb2", b"h:\xd9\xa1", b"h:+1", b"h: 1", b"h:1 ", b"h:1_0", b"10.0.0.9\r:1",
    b"10.0.0.9:1\r", b"a\x0bb:1", b"a\xe2\x80\xa8b:1", b"a\x00b:1", b"a\x1cb:1", b"-oProxyCommand=x:1",
    b"$(id):1", b"a b:1", b"010.0.0.1:1", b"0.0.0.0:1", b"x" * 300 + b":1", b"h:1:1",
])
def test_a_bad_line_is_left_out_and_reported_the_rest_served(line: bytes) -> None:
    """One bad pod must not make every poll fail (horovodrun would never scale again)."""
    warnings: list[str] = []
    out = validate(b"10.0.0.1:2\n" + line + b"\nworker-3.example:4\n", "daemon", warnings)
    assert out == b"10.0.0.1:2\nworker-3.example:4\n"
    assert len(warnings) == 1 and "left out a malformed line" in warnings[0]
    assert warnings[0].isprintable()


def test_many_bad_lines_are_counted_not_listed() -> None:
    warnings: list[str] = []
    out = validate(b"".join(b"bad host %d:1\n" % i for i in range(50)) + b"10.0.0.1:1\n", "d", warnings)
    assert out == b"10.0.0.1:1\n" and len(warnings) == 6 and "45 more" in warnings[-1]


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e309"])
def test_non_finite_or_non_positive_durations_are_usage_errors(value: str) -> None:
    with pytest.raises(UsageError, match="finite"):
        parse_args(["--timeout", value])


def test_flags_beat_environment_beat_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCOVERY_PORT", "9000")
    monkeypatch.setenv("DISCOVERY_MAX_AGE", "5")
    s = parse_args(["--max-age=7", "--fallback", "cache"])
    assert s["url"] == "http://127.0.0.1:9000" and s["max_age"] == 7 and s["fallback"] == "cache"
    monkeypatch.setenv("DISCOVERY_URL", "unix:/x")
    assert parse_args([])["url"] == "unix:/x" and parse_args([])["max_age"] == 5


KUBECONFIG_DOC = {
    "apiVersion": "v1", "kind": "Config", "current-context": "c", "preferences": {},
    "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443",
                                            "certificate-authority-data": "TFMwdExTMUNSVWRK" * 20,
                                            "insecure-skip-tls-verify": False}}],
    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ns"}}],
    "users": [{"name": "u", "user": {"token": "a:b c'd\"e#f", "username": "007"}},
              {"name": "empty", "user": {}}, {"name": "n", "user": None}]}


@pytest.mark.parametrize("style", ["block", "flow", "indented", "json", "json-compact"])
def test_kubeconfig_in_any_style_is_read(style: str) -> None:
    doc = KUBECONFIG_DOC
    text = {"block": lambda: yaml.safe_dump(doc, default_flow_style=False, sort_keys=False),  # kubectl's
            "flow": lambda: yaml.safe_dump(doc, default_flow_style=True),  # older PyYAML's default
            "indented": lambda: yaml.safe_dump(doc, sort_keys=True, indent=4),
            "json": lambda: json.dumps(doc, indent=2),
            "json-compact": lambda: json.dumps(doc)}[style]()
    assert load_kubeconfig(text, "kc") == doc


def test_a_bad_kubeconfig_is_a_one_line_usage_error() -> None:
    with pytest.raises(UsageError, match=r"^kubeconfig kc: cannot parse at line 2: ") as e:
        load_kubeconfig("a: [1,\nb: }\n", "kc")
    assert "\n" not in str(e.value)


# -- the command -----------------------------------------------------------------------------
@pytest.mark.parametrize("args, msg", [(["--bogus"], "unknown argument '--bogus'"),
                                       (["--timeout", "soon"], "--timeout"),
                                       (["--fallback", "maybe"], "--fallback must be one of"),
                                       (["--url", "https://x"], "bad DISCOVERY_URL")])
def test_usage_errors_exit_2_with_one_line(args: list[str], msg: str) -> None:
    r = run(*args)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines() == [r.stderr.strip()], r
    assert msg in r.stderr


def test_help_exits_0() -> None:
    r = run("--help")
    assert r.returncode == 0 and "DISCOVERY_URL" in r.stdout


def test_imports_only_the_standard_library() -> None:
    code = ("import sys; import discovery.discover_hosts, discovery.discover_api; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] not in sys.stdlib_module_names "
            "and m.split('.')[0] not in ('discovery', 'shared', '__main__', '_distutils_hack') "
            "and not m.startswith('__editable__')); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=daemon_env(),
                         cwd="/", timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_daemon_down_exits_1_with_one_line_and_no_output(tmp_path: Path) -> None:
    r = run("--url", "http://127.0.0.1:1")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "error: daemon at http://127.0.0.1:1 unreachable (Connection refused)\n"
    r = run("--url", f"unix:{tmp_path}/none.sock", "--fallback", "cache", "--cache-file", str(tmp_path / "c"))
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert "cache fallback" in r.stderr and "No such file" in r.stderr


def test_answers_from_daemon_then_cache_then_api(cluster, daemon, tmp_path: Path) -> None:
    for i in (1, 2, 3):
        fake_pod(cluster, f"w-{i}", f"10.9.0.{i}", annotations={"elastic-horovod/slots": str(i)})
    d = daemon(cluster)
    d.wait_for(lambda: len(d.hosts() or []) == 3, 20, "3 hosts")
    served = "\n".join(d.hosts() or []) + "\n"
    cache = tmp_path / "cache"
    env = {"DISCOVERY_URL": d.url, "DISCOVERY_FALLBACK": "cache", "DISCOVERY_CACHE_FILE": str(cache)}
    r = run(env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, served, "")
    assert cache.read_text() == served
    d.stop()
    r = run(env=env)  # daemon gone: the last good answer
    assert (r.returncode, r.stdout, r.stderr) == (0, served, "")
    old = time.time() - 600
    os.utime(cache, (old, old))
    r = run(env=env)
    assert r.returncode == 1 and r.stdout == "" and "old (--max-cache-age 300)" in r.stderr
    # one LIST against the API, with the cluster's kubeconfig (JSON) and as block YAML
    yaml_kubeconfig = tmp_path / "kubeconfig.yaml"
    yaml_kubeconfig.write_text(yaml.safe_dump(json.loads(cluster.kubeconfig.read_text())))
    for kc in (cluster.kubeconfig, yaml_kubeconfig):
        r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(kc), env={"DISCOVERY_URL": d.url})
        assert (r.returncode, r.stdout, r.stderr) == (0, served, "")
    r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(tmp_path / "nope"),
            env={"DISCOVERY_URL": d.url})
    assert r.returncode == 2 and "kubeconfig" in r.stderr and len(r.stderr.splitlines()) == 1


def test_stale_daemon_is_not_trusted(cluster, daemon, tmp_path: Path) -> None:
    fake_pod(cluster, "w-1", "10.9.0.1")
    d = daemon(cluster)
    d.wait_hosts(["10.9.0.1:1"])
    env = {"DISCOVERY_URL": d.url, "DISCOVERY_MAX_AGE": "1", "DISCOVERY_FALLBACK": "cache",
           "DISCOVERY_CACHE_FILE": str(tmp_path / "cache")}
    assert run(env=env).stdout == "10.9.0.1:1\n"
    cluster.restart_api(down_seconds=4)
    d.wait_for(lambda: float(d.get("/hosts")[1]["x-discovery-age"]) > 1.2, 10, "age > 1.2s")
    r = run(env={**env, "DISCOVERY_FALLBACK": "none"})
    assert r.returncode == 1 and r.stdout == "" and "list is stale" in r.stderr
    r = run(env=env)  # the cache still holds the last trusted answer
    assert (r.returncode, r.stdout) == (0, "10.9.0.1:1\n")


def test_token_group_and_unix_socket(cluster, daemon, tmp_path: Path) -> None:
    labels = {"app": "elastic-horovod", "role": "worker"}
    fake_pod(cluster, "a-1", "10.9.0.1", labels={**labels, "job": "a"})
    fake_pod(cluster, "b-1", "10.9.0.2", labels={**labels, "job": "b"})
    fake_pod(cluster, "b-2", "10.9.0.3", labels={**labels, "job": "b"})
    sock = tmp_path / "d.sock"
    d = daemon(cluster, "--group-by", "job", "--socket", str(sock), token="t0k")
    assert d.url == f"unix:{sock}"
    env = {"DISCOVERY_URL": d.url, "DISCOVERY_TOKEN": "t0k"}
    deadline = time.monotonic() + 20
    while (r := run("--group", "b", env=env)).stdout.count("\n") != 2 and time.monotonic() < deadline:
        pass
    assert r.returncode == 0 and sorted(r.stdout.splitlines()) == ["10.9.0.2:1", "10.9.0.3:1"]
    r = run(env={**env, "DISCOVERY_GROUP": "a"})
    assert (r.returncode, r.stdout, r.stderr) == (0, "10.9.0.1:1\n", "")
    r = run(env={"DISCOVERY_URL": d.url, "DISCOVERY_GROUP": "a"})  # no token
    assert r.returncode == 1 and r.stdout == "" and "HTTP 401" in r.stderr
    r = run(env=env)  # no group
    assert r.returncode == 1 and r.stdout == "" and "group required" in r.stderr


def _self_signed_pem() -> tuple[bytes, bytes]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "discover-hosts-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_api_fallback_with_client_certificate_data_leaves_no_key_files(cluster, tmp_path: Path) -> None:
    import base64
    fake_pod(cluster, "w-1", "10.9.0.1")
    cert, key = _self_signed_pem()
    doc = json.loads(cluster.kubeconfig.read_text())
    user = doc["users"][0]["user"]
    user["client-certificate-data"] = base64.b64encode(cert).decode()
    user["client-key-data"] = base64.b64encode(key).decode()
    good = tmp_path / "good.kubeconfig"
    good.write_text(json.dumps(doc))
    user["client-key-data"] = base64.b64encode(b"not a key").decode()
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text(json.dumps(doc))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"DISCOVERY_URL": "http://127.0.0.1:1", "TMPDIR": str(scratch)}

    r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(good), env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "10.9.0.1:1\n", "")
    r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(bad), env=env)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: kubeconfig {bad}")
    # the decoded certificate and key were written for the TLS context and removed at once,
    # on success and on failure alike
    assert list(scratch.iterdir()) == []


PLUGIN = """#!{python}
import json, os, sys
seen = {{"argv": sys.argv[1:], "env": os.environ.get("PLUGIN_ENV"), "info": os.environ.get("KUBERNETES_EXEC_INFO"),
        "stdin": sys.stdin.read() if sys.stdin else None}}
open({seen!r}, "w").write(json.dumps(seen))
mode = sys.argv[1]
if mode == "fail":
    sys.stderr.write("working...\\nno credentials for you\\n")
    sys.exit(3)
if mode == "garbage":
    print("token: yes")
    sys.exit(0)
if mode == "sleep":
    import time
    time.sleep(60)
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": {token!r}}}}}))
"""


def _exec_kubeconfig(cluster, tmp_path: Path, mode: str, command: str = "./plugin") -> Path:
    """The cluster's kubeconfig in flow-style YAML, its user an exec plugin (``tmp_path/plugin``)."""
    doc = json.loads(cluster.kubeconfig.read_text())
    token = doc["users"][0]["user"].pop("token")
    doc["users"][0]["user"]["exec"] = {
        "apiVersion": "client.authentication.k8s.io/v1", "command": command, "args": [mode, "--flag"],
        "env": [{"name": "PLUGIN_ENV", "value": "from the kubeconfig"}], "provideClusterInfo": True,
        "interactiveMode": "Never", "installHint": "install it\nfrom the test"}
    plugin = tmp_path / "plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable, seen=str(tmp_path / "seen.json"), token=token))
    plugin.chmod(0o755)
    kc = tmp_path / f"{mode}.kubeconfig"
    kc.write_text(yaml.safe_dump(doc, default_flow_style=True))
    return kc


def test_api_fallback_with_flow_style_json_and_an_exec_plugin(cluster, tmp_path: Path) -> None:
    fake_pod(cluster, "w-1", "10.9.0.1")
    env = {"DISCOVERY_URL": "http://127.0.0.1:1"}
    doc = json.loads(cluster.kubeconfig.read_text())
    flow, compact = tmp_path / "flow.kubeconfig", tmp_path / "compact.kubeconfig"
    flow.write_text(yaml.safe_dump(doc, default_flow_style=True))
    assert flow.read_text().startswith("{")  # what the old subset parser refused
    compact.write_text(json.dumps(doc, separators=(",", ":")))
    for kc in (flow, compact):
        r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(kc), env=env)
        assert (r.returncode, r.stdout, r.stderr) == (0, "10.9.0.1:1\n", ""), kc
    # an exec plugin, run as kubectl runs it: relative to the kubeconfig, its args and env,
    # the ExecCredential request in KUBERNETES_EXEC_INFO, stdin closed
    kc = _exec_kubeconfig(cluster, tmp_path, "ok")
    r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(kc), env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "10.9.0.1:1\n", "")
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == ["ok", "--flag"] and seen["env"] == "from the kubeconfig" and seen["stdin"] == ""
    info = json.loads(seen["info"])
    assert info["kind"] == "ExecCredential" and info["apiVersion"] == "client.authentication.k8s.io/v1"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == doc["clusters"][0]["cluster"]["server"]


@pytest.mark.parametrize("mode, command, code, message", [
    ("ok", "./no-such-plugin", 2, "exec plugin './no-such-plugin' not found (install it from the test)"),
    ("fail", "./plugin", 1, "exec plugin './plugin' failed (exit 3): no credentials for you"),
    ("garbage", "./plugin", 2, "exec plugin './plugin' did not print an ExecCredential (not JSON)"),
])
def test_api_fallback_with_a_bad_exec_plugin_is_one_line_naming_it(cluster, tmp_path: Path, mode: str,
                                                                   command: str, code: int, message: str) -> None:
    kc = _exec_kubeconfig(cluster, tmp_path, mode, command)
    r = run("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(kc),
            env={"DISCOVERY_URL": "http://127.0.0.1:1"})
    assert r.returncode == code and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert message in r.stderr and f"kubeconfig {kc}" in r.stderr


def test_an_exec_plugin_that_hangs_is_stopped_at_its_deadline(tmp_path: Path) -> None:
    from discovery.discover_api import exec_credential
    plugin = tmp_path / "plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable, seen=str(tmp_path / "seen.json"), token="t"))
    plugin.chmod(0o755)
    spec = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin), "args": ["sleep"]}
    with pytest.raises(Failure, match=f"exec plugin '{plugin}' did not answer within 1 s"):
        exec_credential(spec, {}, str(tmp_path), "kc", 1.0)
    with pytest.raises(UsageError, match="wants a terminal"):
        exec_credential({**spec, "interactiveMode": "Always"}, {}, str(tmp_path), "kc", 1.0)
    with pytest.raises(UsageError, match="apiVersion 'v0' is not one of"):
        exec_credential({**spec, "apiVersion": "v0"}, {}, str(tmp_path), "kc", 1.0)


# -- hostile daemons ----------------------------------------------------------------------------
class FakeDaemon:
    """A loopback socket server answering every connection with ``answer(conn)`` in a thread."""

    def __init__(self, answer) -> None:  # type: ignore[no-untyped-def]
        import socket
        import threading
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.answer = answer
        self.sent = 0
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            try:
                self.answer(self, conn)
            except OSError:
                pass
        self.finished.set()

    def close(self) -> None:
        self.sock.close()


def test_timeout_bounds_the_whole_exchange_with_a_dripping_daemon() -> None:
    """A daemon that sends one byte a second used to keep discover-hosts waiting for as long
    as it liked (the timeout was per read): the whole call now ends at --timeout."""
    body = b"10.0.0.1:1\n" * 6
    reply = b"HTTP/1.0 200 OK\r\nX-Discovery-Age: 0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    stop = __import__("threading").Event()

    def drip(fake, conn) -> None:  # type: ignore[no-untyped-def]
        for i in range(len(reply)):
            if stop.is_set():
                return
            conn.sendall(reply[i:i + 1])
            fake.sent += 1
            stop.wait(0.5)

    fake = FakeDaemon(drip)
    try:
        r = run("--url", fake.url, "--timeout", "2")
        assert r.returncode == 1 and r.stdout == ""
        assert "no complete answer within --timeout 2s" in r.stderr
        assert fake.sent < len(reply) and not fake.finished.is_set()  # it stopped waiting, not the daemon
    finally:
        stop.set()
        fake.close()


@pytest.mark.parametrize("age", ["-inf", "-1", "nan", "inf"])
def test_an_age_that_is_not_a_finite_non_negative_number_is_not_trusted(age: str) -> None:
    body = b"10.0.0.1:1\n"

    def answer(fake, conn) -> None:  # type: ignore[no-untyped-def]
        conn.sendall(b"HTTP/1.0 200 OK\r\nX-Discovery-Age: %s\r\nContent-Length: %d\r\n\r\n%s"
                     % (age.encode(), len(body), body))

    fake = FakeDaemon(answer)
    try:
        r = run("--url", fake.url)
        assert r.returncode == 1 and r.stdout == "" and "list is stale" in r.stderr
    finally:
        fake.close()


def test_a_bad_line_from_the_daemon_does_not_stop_the_job_from_scaling() -> None:
    body = b"10.0.0.1:1\n10.0.0.2\r:1\n10.0.0.3:1\n"

    def answer(fake, conn) -> None:  # type: ignore[no-untyped-def]
        conn.sendall(b"HTTP/1.0 200 OK\r\nX-Discovery-Age: 0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    fake = FakeDaemon(answer)
    try:
        r = run("--url", fake.url)
        assert (r.returncode, r.stdout) == (0, "10.0.0.1:1\n10.0.0.3:1\n")
        assert r.stderr.startswith("warning: ") and "'10.0.0.2\\r:1'" in r.stderr
    finally:
        fake.close()


def test_an_unknown_group_is_told_apart_from_a_known_group_with_no_ready_host(cluster, daemon) -> None:
    cluster.create_pod("pending-a", labels={"app": "elastic-horovod", "role": "worker", "job": "a"},
                       node_name="elsewhere")  # never runs: the group is known, its host list empty
    fake_pod(cluster, "ready-b", "10.9.0.2", labels={"app": "elastic-horovod", "role": "worker", "job": "b"})
    d = daemon(cluster, "--group-by", "job")
    d.wait_hosts(["10.9.0.2:1"], group="b")
    status, headers, body = d.get("/hosts?group=a")
    assert (status, body, headers["x-discovery-group"]) == (200, "", "known")
    status, headers, body = d.get("/hosts?group=typo")
    assert (status, body, headers["x-discovery-group"]) == (200, "", "unknown")
    assert d.json("/hosts.json?group=typo")["group_known"] is False
    assert d.json("/hosts.json?group=a")["group_known"] is True
    r = run("--group", "a", env={"DISCOVERY_URL": d.url})
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = run("--group", "typo", env={"DISCOVERY_URL": d.url})
    assert (r.returncode, r.stdout) == (0, "")  # pods still pending must not fail the job
    assert r.stderr.startswith("warning: ") and "no pod has ever carried group 'typo'" in r.stderr


def test_daemon_closes_idle_and_half_sent_connections_and_caps_them(cluster, daemon) -> None:
    import socket
    fake_pod(cluster, "w-1", "10.9.0.1")
    d = daemon(cluster)
    d.wait_hosts(["10.9.0.1:1"])
    host, port = d.url[7:].rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=60) for _ in range(5)]
    half = [socket.create_connection((host, int(port)), timeout=60) for _ in range(5)]
    for s in half:
        s.sendall(b"GET /hosts HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
    extra = [socket.create_connection((host, int(port)), timeout=60) for _ in range(300)]
    try:
        def closed(s: socket.socket) -> bool:
            s.settimeout(0.01)
            try:
                return s.recv(1) == b""
            except TimeoutError:
                return False
            except OSError:
                return True
        # past the cap (256) connections are closed at once; the rest once they wait > 5 s
        wait_for_all = lambda: all(closed(s) for s in idle + half + extra)  # noqa: E731
        d.wait_for(wait_for_all, 60, "every idle or half-sent connection closed by the daemon")
        assert d.hosts() == ["10.9.0.1:1"]  # still serving
    finally:
        for s in idle + half + extra:
            s.close()


# -- the installed command: -S start (the poll's CPU) ----------------------------------------
SCRIPT = Path(sys.executable).parent / "discover-hosts"


def run_installed(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=daemon_env(env), cwd="/",
                          timeout=60)


def test_the_installed_command_serves_every_mode_without_the_site_module(cluster, daemon, tmp_path: Path) -> None:
    """bin/discover-hosts starts Python with -S (no site module, no .pth hooks) and puts back
    only what it needs: the daemon, the cache and the api fallback (PyYAML from site-packages,
    a YAML kubeconfig) all still answer, and usage errors are still one line."""
    assert SCRIPT.exists(), "scripts/setup installs discover-hosts beside the venv's python"
    for i in (1, 2):
        fake_pod(cluster, f"w-{i}", f"10.9.1.{i}")
    d = daemon(cluster)
    d.wait_for(lambda: len(d.hosts() or []) == 2, 20, "2 hosts")
    served = "\n".join(d.hosts() or []) + "\n"
    cache = tmp_path / "cache"
    env = {"DISCOVERY_URL": d.url, "DISCOVERY_FALLBACK": "cache", "DISCOVERY_CACHE_FILE": str(cache)}
    r = run_installed(env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, served, "")
    yaml_kubeconfig = tmp_path / "kubeconfig.yaml"
    yaml_kubeconfig.write_text(yaml.safe_dump(json.loads(cluster.kubeconfig.read_text())))
    d.stop()
    r = run_installed(env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, served, "")
    r = run_installed("--fallback", "api", "--selector", SELECTOR, "--kubeconfig", str(yaml_kubeconfig),
                      env={"DISCOVERY_URL": d.url})
    assert (r.returncode, r.stdout, r.stderr) == (0, served, "")
    r = run_installed("--fallback", "bogus")
    assert r.returncode == 2 and r.stderr == "error: --fallback must be one of none, cache, api, got 'bogus'\n"


def test_the_fast_path_imports_neither_os_nor_site(cluster, daemon) -> None:
    """A poll answered by the daemon loads only the modules it needs: no ``site`` (-S), no
    ``os`` (~1 ms each of the poll's CPU), nothing that pulls in ``re`` or ``enum``."""
    fake_pod(cluster, "w-1", "10.9.2.1")
    d = daemon(cluster)
    d.wait_hosts(["10.9.2.1:1"])
    code = ("import sys; import discovery.discover_hosts as d; code = d.main([]); "
            "print(code, sorted(m for m in ('os', 'site', 're', 'enum', 'json') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       env=daemon_env({"DISCOVERY_URL": d.url}), cwd="/", timeout=60)
    assert r.stdout == "10.9.2.1:1\n0 []\n", r.stderr
