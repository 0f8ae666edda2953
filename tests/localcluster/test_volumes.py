"""localcluster.volumes: which host directory a local pod gets on /data (an emptyDir of its
own, or a node-local hostPath kept after the pod)."""
import pytest

from localcluster.errors import KubeletError
from localcluster.volumes import data_source


def pod(volume: dict | None, mount: str = "/data") -> dict:
    spec: dict = {"containers": [{"name": "worker"}]}
    if volume is not None:
        spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": mount}]
        spec["volumes"] = [dict(volume, name="data")]
    return {"spec": spec}


def test_a_pod_without_a_hostpath_on_data_gets_its_own_directory(tmp_path):
    for p in (pod(None), pod({"emptyDir": {}}), pod({"hostPath": {"path": "/cache"}}, mount="/other")):
        assert data_source(p, tmp_path / "node", tmp_path / "pod") == tmp_path / "pod" / "data"
    assert (tmp_path / "pod" / "data").is_dir()


def test_a_hostpath_on_data_is_the_nodes_directory_shared_by_pods_that_name_it(tmp_path):
    cache = pod({"hostPath": {"path": "/var/lib/cache", "type": "DirectoryOrCreate"}})
    first = data_source(cache, tmp_path / "node", tmp_path / "pod-a")
    assert first == tmp_path / "node" / "var" / "lib" / "cache" and first.is_dir()
    (first / "kept").write_text("x")
    assert (data_source(cache, tmp_path / "node", tmp_path / "pod-b") / "kept").read_text() == "x"
    assert data_source(pod({"hostPath": {"path": "/var/lib/cache", "type": "Directory"}}),
                       tmp_path / "node", tmp_path / "pod-c") == first


@pytest.mark.parametrize("source, message", [
    ({"path": "relative"}, "not an absolute"),
    ({"path": "/var/../etc"}, "not an absolute"),
    ({"path": "//x"}, "not an absolute"),
    ({"path": "/"}, "not an absolute"),
    ({"path": "/x\0y"}, "not an absolute"),
    ({"path": "/x", "type": "Socket"}, "not supported"),
    ({"path": "/missing", "type": "Directory"}, "no such directory"),
])
def test_a_bad_hostpath_is_one_line_and_no_directory(tmp_path, source, message):
    with pytest.raises(KubeletError, match=message):
        data_source(pod({"hostPath": source}), tmp_path / "node", tmp_path / "pod")
    assert not (tmp_path / "node" / "etc").exists()


def test_a_hostpath_that_cannot_be_made_or_is_not_a_map_is_one_line(tmp_path):
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "var").write_text("a file where the directory would go")
    with pytest.raises(KubeletError, match=r"hostPath /var/cache: cannot make .*: Not a directory"):
        data_source(pod({"hostPath": {"path": "/var/cache", "type": "DirectoryOrCreate"}}),
                    tmp_path / "node", tmp_path / "pod")
    with pytest.raises(KubeletError, match="a map of path and type, got str"):
        data_source(pod({"hostPath": "/var/cache"}), tmp_path / "node", tmp_path / "pod")
    odd = {"spec": {"containers": ["worker"], "volumes": ["data"]}}
    assert data_source(odd, tmp_path / "node", tmp_path / "pod") == tmp_path / "pod" / "data"
