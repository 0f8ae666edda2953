"""What the built images hold, layer by layer: no private key and no host key in any layer (a
file deleted in a later layer still ships in the earlier one), no build tree, wheels or local
cluster in the runtime image, and a daemon image that runs as an unprivileged user."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(3600)

PRIVATE_NAMES = {"id_ed25519", "id_rsa", "id_ecdsa", "id_dsa", "ssh_host_ed25519_key", "ssh_host_rsa_key",
                 "ssh_host_ecdsa_key", "ssh_host_dsa_key"}
# a PEM/OpenSSH private key block (not code that merely names the marker, as cryptography does)
PRIVATE_BLOCK = re.compile(rb"^-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\s*$", re.M)
SMALL = 64 * 1024


def podman_json(*args: str):
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def layer_dirs(image: str) -> list[Path]:
    """The diff directory of every layer of ``image`` (podman's overlay storage), base first."""
    info = podman_json("info", "--format", "json")
    root = Path(info["store"]["graphRoot"])
    assert info["store"]["graphDriverName"] == "overlay"
    image_id = podman_json("image", "inspect", image)[0]["Id"]
    images = json.loads((root / "overlay-images" / "images.json").read_text())
    top = next(entry["layer"] for entry in images if entry["id"] == image_id)
    layers = {entry["id"]: entry for entry in json.loads((root / "overlay-layers" / "layers.json").read_text())}
    chain, current = [], top
    while current:
        chain.append(root / "overlay" / current / "diff")
        current = layers[current].get("parent")
    assert all(d.is_dir() for d in chain)
    return chain[::-1]


def private_keys_in(layer: Path) -> list[str]:
    found = []
    for dirpath, _, files in os.walk(layer):
        for name in files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, layer)
            if name in PRIVATE_NAMES:
                found.append(rel)
                continue
            try:
                st = os.lstat(path)  # regular files only: the base has /dev/zero and friends
                if not stat.S_ISREG(st.st_mode) or st.st_size > SMALL:
                    continue
                with open(path, "rb") as fh:
                    if PRIVATE_BLOCK.search(fh.read()):
                        found.append(rel)
            except OSError:
                continue
    return found


@pytest.mark.parametrize("which", [0, 1], ids=["worker", "daemon"])
def test_no_private_key_or_host_key_in_any_layer(images, which):
    layers = layer_dirs(images[which])
    assert len(layers) >= 2
    found = {str(layer.parent.name)[:12]: keys for layer in layers if (keys := private_keys_in(layer))}
    assert not found, f"private keys baked into {images[which]}: {found}"


def test_the_runtime_image_ships_no_wheels_build_tree_or_local_cluster(images):
    probe = subprocess.run(
        ["podman", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", images[0], "-c",
         "ls -d /wheels /src /tmp/wheels 2>/dev/null; "
         "/opt/venv/bin/python -c 'import importlib.util as u; print(u.find_spec(\"localcluster\"))'; "
         "command -v local-cluster || true; "
         "for c in discovery-daemon elastic-run ssh-bootstrap dataset-sync discover-hosts check-cuda; do "
         "command -v $c; done"],
        capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.split()
    assert lines[0] == "None", probe.stdout  # no /wheels, /src; no localcluster package
    assert [os.path.basename(p) for p in lines[1:]] == ["discovery-daemon", "elastic-run", "ssh-bootstrap",
                                                        "dataset-sync", "discover-hosts", "check-cuda"]


def test_the_daemon_image_runs_as_an_unprivileged_user(images):
    config = podman_json("image", "inspect", images[1])[0]["Config"]
    assert config["User"] == "10001"
    who = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", images[1], "-c",
                          "id -u; /opt/venv/bin/python -c 'import discovery.cli, kubernetes, aiohttp'"],
                         capture_output=True, text=True, timeout=300)
    assert who.returncode == 0, who.stderr
    assert who.stdout.split() == ["10001"]
