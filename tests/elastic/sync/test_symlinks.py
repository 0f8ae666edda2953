"""Datasets made of symlinks: ``dataset-sync --symlinks refuse|copy-unsafe|keep`` end to end
against the local cluster's pods (real sshd, rsync and the SFTP fallback), and the manifest
describing what lands on the host."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from elastic.sync.manifest import MANIFEST_NAME, UnsafeSymlink, build_manifest
from tests.elastic.conftest import cli, private_cache

POD = "worker-0"


def sync(ssh_dir: Path, src: Path, dest: str, host: str, *flags: str):
    return cli("dataset-sync", str(src), dest, "--ssh-config", str(ssh_dir / "ssh_config"), "--host", host,
               "--retries", "1", *flags, env=private_cache(src.parent))


def shared_storage(root: Path) -> Path:
    """What a dataset's links point into: a directory outside SRC with files and a nested link."""
    shared = root / "shared"
    (shared / "images").mkdir(parents=True)
    (shared / "images" / "a.bin").write_bytes(b"a" * 1000)
    (shared / "images" / "b.bin").write_bytes(b"b" * 2000)
    (shared / "images" / "first").symlink_to("a.bin")          # inside the copied directory
    (shared / "labels.csv").write_bytes(b"a,0\nb,1\n")
    return shared


def linked_dataset(root: Path) -> Path:
    shared = shared_storage(root)
    src = root / "ds"
    src.mkdir()
    (src / "own.bin").write_bytes(b"own" * 100)
    (src / "images").symlink_to(shared / "images")                  # absolute: out of SRC
    (src / "labels.csv").symlink_to(Path("..") / "shared" / "labels.csv")  # relative, climbs out
    (src / "latest").symlink_to("own.bin")                          # inside SRC: stays a link
    return src


def on_pod(cluster, script: str) -> str:
    proc = cluster.ssh(POD, script, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def host_manifest(cluster, dest: str) -> dict:
    return json.loads(on_pod(cluster, f"cat {dest}/{MANIFEST_NAME}"))


def test_refuse_is_the_default_and_names_the_link_and_the_flag(sync_cluster, pod_ips, ssh_dir, tmp_path):
    src = linked_dataset(tmp_path)
    proc = sync(ssh_dir, src, "/data/refused", pod_ips[POD])
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"error: refusing symlink images -> {tmp_path / 'shared' / 'images'}: "
                                          "it points outside SRC (--symlinks copy-unsafe copies its target")
    assert not (sync_cluster.pod_data_dir(POD) / "refused").exists()
    assert not (sync_cluster.pod_data_dir(POD) / ".refused.dataset-sync").exists()


@pytest.mark.parametrize("transport", ["rsync", "sftp"])
def test_copy_unsafe_copies_the_targets_and_the_manifest_says_so(sync_cluster, pod_ips, ssh_dir, tmp_path,
                                                                 transport):
    src = linked_dataset(tmp_path)
    dest = f"/data/copied-{transport}"
    proc = sync(ssh_dir, src, dest, pod_ips[POD], "--symlinks", "copy-unsafe", "--transport", transport)
    assert proc.returncode == 0, proc.stderr
    # on the host: the links out of SRC are now a directory and a file with the targets' content
    out = on_pod(sync_cluster, f"cd {dest} && test -d images && ! test -L images && ! test -L labels.csv && "
                                f"sha256sum images/a.bin images/b.bin labels.csv own.bin && "
                                f"readlink images/first && readlink latest")
    sums = {line.split()[1]: line.split()[0] for line in out.splitlines()[:4]}
    assert sums == {"images/a.bin": hashlib.sha256(b"a" * 1000).hexdigest(),
                    "images/b.bin": hashlib.sha256(b"b" * 2000).hexdigest(),
                    "labels.csv": hashlib.sha256(b"a,0\nb,1\n").hexdigest(),
                    "own.bin": hashlib.sha256(b"own" * 100).hexdigest()}
    assert out.splitlines()[4:] == ["a.bin", "own.bin"]  # links inside the tree stay links
    manifest = host_manifest(sync_cluster, dest)
    assert sorted(manifest["files"]) == ["images/a.bin", "images/b.bin", "labels.csv", "own.bin"]
    assert manifest["links"] == {"images/first": "a.bin", "latest": "own.bin"}
    assert manifest["dirs"] == ["images"]
    # a second run finds the host unchanged
    again = sync(ssh_dir, src, dest, pod_ips[POD], "--symlinks", "copy-unsafe", "--transport", transport)
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("transport", ["rsync", "sftp"])
def test_keep_keeps_links_as_links_and_never_writes_through_them(sync_cluster, pod_ips, ssh_dir, tmp_path,
                                                                 transport):
    outside = sync_cluster.pod_data_dir(POD) / f"outside-{transport}"  # the pod's /data/outside-...
    outside.mkdir()
    src = tmp_path / "ds"
    src.mkdir()
    (src / "own.bin").write_bytes(b"own")
    (src / "sub").symlink_to(f"/data/outside-{transport}")  # absolute, out of SRC and DEST
    dest = f"/data/kept-{transport}"
    proc = sync(ssh_dir, src, dest, pod_ips[POD], "--symlinks", "keep", "--transport", transport)
    assert proc.returncode == 0, proc.stderr
    assert on_pod(sync_cluster, f"readlink {dest}/sub").strip() == f"/data/outside-{transport}"
    assert host_manifest(sync_cluster, dest)["links"] == {"sub": f"/data/outside-{transport}"}

    # the link becomes a directory with a file: the host replaces the link, never writes through it
    (src / "sub").unlink()
    (src / "sub").mkdir()
    (src / "sub" / "f.bin").write_bytes(b"f" * 10)
    proc = sync(ssh_dir, src, dest, pod_ips[POD], "--symlinks", "keep", "--transport", transport)
    assert proc.returncode == 0, proc.stderr
    assert list(outside.iterdir()) == []
    assert on_pod(sync_cluster, f"test -d {dest}/sub && ! test -L {dest}/sub && cat {dest}/sub/f.bin") == "f" * 10


def test_keep_refuses_links_named_like_the_files_dataset_sync_writes_on_the_host(sync_cluster, pod_ips,
                                                                                 ssh_dir, tmp_path):
    """A link named like the manifest's temporary file would have the host write the manifest
    through it, outside DEST."""
    src = tmp_path / "ds"
    src.mkdir()
    (src / "own.bin").write_bytes(b"own")
    (src / f"{MANIFEST_NAME}.tmp").symlink_to("/data/victim")
    proc = sync(ssh_dir, src, "/data/reserved", pod_ips[POD], "--symlinks", "keep")
    assert proc.returncode == 2
    assert f"refusing {MANIFEST_NAME}.tmp: dataset-sync writes that name on the hosts itself" in proc.stderr
    assert not (sync_cluster.pod_data_dir(POD) / "victim").exists()
    (src / f"{MANIFEST_NAME}.tmp").unlink()
    (src / ".own.bin.dataset-sync-tmp").symlink_to("/data/victim")  # the SFTP fallback's upload name
    proc = sync(ssh_dir, src, "/data/reserved", pod_ips[POD], "--symlinks", "keep", "--transport", "sftp")
    assert proc.returncode == 2 and "refusing .own.bin.dataset-sync-tmp" in proc.stderr
    assert not (sync_cluster.pod_data_dir(POD) / "victim").exists()


# The manifest alone (no host): what copy-unsafe cannot copy.

def test_copy_unsafe_refuses_a_missing_target(tmp_path):
    src = tmp_path / "ds"
    src.mkdir()
    (src / "gone").symlink_to(tmp_path / "nothing-here")
    with pytest.raises(UnsafeSymlink, match=r"refusing symlink gone -> .*nothing-here: its target cannot be copied"):
        build_manifest(str(src), symlinks="copy-unsafe")


def test_copy_unsafe_refuses_a_loop(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "again").symlink_to(shared)  # absolute: copied, and it contains itself
    src = tmp_path / "ds"
    src.mkdir()
    (src / "data").symlink_to(shared)
    with pytest.raises(UnsafeSymlink, match="a directory it is inside of .a symlink loop"):
        build_manifest(str(src), symlinks="copy-unsafe")
    (shared / "again").unlink()
    (src / "up").symlink_to(tmp_path)  # holds SRC itself
    with pytest.raises(UnsafeSymlink, match="symlink loop"):
        build_manifest(str(src), symlinks="copy-unsafe")


def test_keep_lists_every_link_and_copy_unsafe_a_file_for_a_file_link(tmp_path):
    src = linked_dataset(tmp_path)
    kept = build_manifest(str(src), symlinks="keep")
    assert kept.links == {"images": str(tmp_path / "shared" / "images"), "labels.csv": "../shared/labels.csv",
                          "latest": "own.bin"}
    assert sorted(kept.files) == ["own.bin"]
    copied = build_manifest(str(src), symlinks="copy-unsafe")
    assert copied.files["labels.csv"].sha256 == hashlib.sha256(b"a,0\nb,1\n").hexdigest()
    assert copied.files["labels.csv"].size == os.stat(tmp_path / "shared" / "labels.csv").st_size
    assert copied.digest != kept.digest
