"""`ssh-bootstrap keys --out keys/` (deploy/README.md) writes the job's private key into the
clone: git must ignore it, so `git add -A` cannot commit it."""
import shutil
import subprocess

import pytest

from tests.deploy.render import ROOT


@pytest.mark.parametrize("path", ["keys/id_ed25519", "keys/id_ed25519.pub", "keys/secret.yaml",
                                  "deploy/id_ed25519", "other/place/id_ed25519"])
def test_the_job_keys_are_ignored(tmp_path, path):
    git = shutil.which("git")
    assert git, "git is needed"
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    proc = subprocess.run([git, "-C", str(tmp_path), "check-ignore", "-q", "--no-index", path])
    assert proc.returncode == 0, f"{path} is not ignored"


def test_the_manifests_are_not_ignored(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    proc = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "-q", "--no-index",
                           "deploy/job/launcher.yaml"])
    assert proc.returncode == 1
