"""The ``HostSource`` seam: ``DiscoveryService`` serves the hosts of whatever source it is given.
A ``StaticFileSource`` (a JSON file of pods) is the second source next to the Kubernetes watch."""
import asyncio
import json

import pytest

from discovery.errors import ConfigError
from discovery.hosts import Rules
from discovery.service import DiscoveryService
from discovery.source import HostSource, KubernetesSource, StaticFileSource

from .podspec import pod


def test_the_service_serves_a_static_files_hosts(tmp_path):
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"items": [pod("w-0", ip="10.0.0.1"), pod("w-1", ip="10.0.0.2"),
                                          pod("w-2", ip="10.0.0.3", ready="False")]}))

    async def serve() -> list[str]:
        source = StaticFileSource(str(path))
        async with DiscoveryService(source, Rules()) as svc:
            table = await svc.wait_for(lambda t: t.synced, timeout=30)
            assert not svc.stale and source.alive
            return [f"{h.host}:{h.slots}" for h in table.hosts]

    assert sorted(asyncio.run(serve())) == ["10.0.0.1:1", "10.0.0.2:1"]


@pytest.mark.parametrize("text, message", [
    ("{", "is not JSON"),
    ('{"items": [1]}', "expected a list of pods"),
])
def test_a_bad_pods_file_is_a_config_error(tmp_path, text, message):
    path = tmp_path / "pods.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        StaticFileSource(str(path))
    with pytest.raises(ConfigError, match="cannot read pods file"):
        StaticFileSource(str(tmp_path / "missing.json"))


def test_both_sources_keep_the_protocol():
    def members(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}
    wanted = {"start", "stop", "drain", "status", "alive"}
    assert wanted <= members(HostSource)
    assert wanted <= members(KubernetesSource) and wanted <= members(StaticFileSource)
