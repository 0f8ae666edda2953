"""scripts/build-images against a stand-in podman (first on PATH): a build that podman 4.3's
layer cache fails with "layer not known" (buildah #5674, a layer removed while the cache was
looked up) is built again once; any other failure ends the script at once, exit 1."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

BUILD_IMAGES = Path(__file__).resolve().parents[2] / "scripts" / "build-images"

# answers what build-images asks: the local base exists, an image's id and size; `build`
# counts its calls in $FAKE_BUILDS and fails the first ones as $FAKE_FAILURES says
PODMAN = """#!/usr/bin/env bash
case "$1 $2" in
  "image exists") exit 0 ;;
  "image inspect") case "$*" in *Size*) echo 456000000 ;; *) echo sha256:0123 ;; esac; exit 0 ;;
esac
if [ "$1" = build ]; then
  n=$(( $(cat "$FAKE_BUILDS" 2>/dev/null || echo 0) + 1 ))
  echo "$n" > "$FAKE_BUILDS"
  failure=$(sed -n "${n}p" "$FAKE_FAILURES")
  if [ -n "$failure" ]; then echo "Error: $failure"; exit 125; fi
  echo "Successfully tagged localhost/elastic-horovod-daemon:t"
  exit 0
fi
exit 0
"""

LAYER_NOT_KNOWN = "checking if cached image exists from a previous build: getting top layer info: layer not known"


def build_daemon(tmp_path: Path, failures: list[str]) -> tuple[subprocess.CompletedProcess, int]:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "podman").write_text(PODMAN)
    (fake / "podman").chmod(0o755)
    (tmp_path / "failures").write_text("".join(f + "\n" for f in failures))
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "ELASTIC_CACHE_DIR": str(tmp_path / "cache"),
           "FAKE_BUILDS": str(tmp_path / "builds"), "FAKE_FAILURES": str(tmp_path / "failures"),
           "PYTHON": sys.executable}
    env.pop("CONTAINER_ENGINE", None)
    done = subprocess.run([str(BUILD_IMAGES), "--only", "daemon", "--base", "local", "--tag", "t"],
                          capture_output=True, text=True, env=env, timeout=300)
    builds = int((tmp_path / "builds").read_text()) if (tmp_path / "builds").exists() else 0
    return done, builds


def test_a_build_the_layer_cache_fails_with_a_removed_layer_is_built_again(tmp_path):
    done, builds = build_daemon(tmp_path, [LAYER_NOT_KNOWN])
    assert done.returncode == 0, done.stderr
    assert builds == 2
    assert "buildah #5674" in done.stderr and "elastic-horovod-daemon:t" in done.stdout


@pytest.mark.parametrize("failures", [["no space left on device"], [LAYER_NOT_KNOWN, LAYER_NOT_KNOWN]],
                         ids=["another failure", "twice"])
def test_any_other_build_failure_ends_the_script(tmp_path, failures):
    done, builds = build_daemon(tmp_path, failures)
    assert done.returncode == 1
    assert builds == len(failures)
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith("build-images: error: building elastic-horovod-daemon:t failed")
