"""``ssh-bootstrap keys --apply`` creates the Secret through the Kubernetes API (official client),
refuses to replace it without --force, and reports an unreachable API in one line.

The API is a minimal fake of the core/v1 Secrets endpoints over real HTTP (the local cluster
serves pods only)."""
from __future__ import annotations

import asyncio
import base64
import json
import threading

import pytest
import yaml
from aiohttp import web

from tests.elastic.conftest import cli

TOKEN = "test-token"


class FakeSecretsAPI:
    """POST/PUT/GET /api/v1/namespaces/{ns}/secrets[/name] on 127.0.0.1, in a thread."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        ns, name = request.match_info["ns"], request.match_info.get("name")
        if request.method == "POST":
            body = await request.json()
            key = (ns, body["metadata"]["name"])
            if key in self.secrets:
                return web.json_response({"kind": "Status", "code": 409, "reason": "AlreadyExists"}, status=409)
            self.secrets[key] = body
            return web.json_response(body, status=201)
        if request.method == "PUT" and (ns, name) in self.secrets:
            self.secrets[(ns, name)] = await request.json()
            return web.json_response(self.secrets[(ns, name)])
        return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/api/v1/namespaces/{ns}/secrets", self._handle)
        app.router.add_route("*", "/api/v1/namespaces/{ns}/secrets/{name}", self._handle)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


@pytest.fixture
def api():
    server = FakeSecretsAPI()
    server.start()
    yield server
    server.stop()


def kubeconfig(path, port: int) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return str(path)


@pytest.mark.slow
def test_apply_creates_the_secret_and_refuses_to_replace_it_without_force(api, tmp_path):
    config = kubeconfig(tmp_path / "kubeconfig", api.port)
    proc = cli("ssh-bootstrap", "keys", "--out", str(tmp_path / "k"), "--namespace", "job", "--apply",
               "--kubeconfig", config)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "Secret job/elastic-horovod-ssh created"
    stored = api.secrets[("job", "elastic-horovod-ssh")]
    assert stored["kind"] == "Secret" and stored["type"] == "Opaque"
    public = (tmp_path / "k" / "id_ed25519.pub").read_text()
    assert base64.b64decode(stored["data"]["id_ed25519.pub"]).decode() == public

    again = cli("ssh-bootstrap", "keys", "--out", str(tmp_path / "k2"), "--namespace", "job", "--apply",
                "--kubeconfig", config)
    assert again.returncode == 2 and "Secret job/elastic-horovod-ssh exists; use --force" in again.stderr
    assert api.secrets[("job", "elastic-horovod-ssh")] == stored

    forced = cli("ssh-bootstrap", "keys", "--out", str(tmp_path / "k3"), "--namespace", "job", "--apply", "--force",
                 "--kubeconfig", config)
    assert forced.returncode == 0 and forced.stdout.splitlines()[-1] == "Secret job/elastic-horovod-ssh replaced"
    assert base64.b64decode(api.secrets[("job", "elastic-horovod-ssh")]["data"]["id_ed25519.pub"]).decode() == \
        (tmp_path / "k3" / "id_ed25519.pub").read_text()
    assert ("PUT", "/api/v1/namespaces/job/secrets/elastic-horovod-ssh") in api.requests


def test_apply_reports_a_bad_token_and_an_unreachable_api_in_one_line(api, tmp_path):
    config = tmp_path / "kubeconfig"
    kubeconfig(config, api.port)
    doc = yaml.safe_load(config.read_text())
    doc["users"][0]["user"]["token"] = "wrong"
    config.write_text(json.dumps(doc))
    proc = cli("ssh-bootstrap", "keys", "--out", str(tmp_path / "k"), "--apply", "--kubeconfig", str(config))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "HTTP 401" in proc.stderr, proc.stderr
    api.stop()
    proc = cli("ssh-bootstrap", "keys", "--out", str(tmp_path / "k2"), "--apply",
               "--kubeconfig", kubeconfig(tmp_path / "down", api.port))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    cause = f"error: cannot reach the Kubernetes API at http://127.0.0.1:{api.port}: "
    assert proc.stderr.startswith(cause), proc.stderr
    assert "Connection refused" in proc.stderr
