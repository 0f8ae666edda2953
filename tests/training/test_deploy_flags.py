"""training.deploy_flags: the trainer's flags as deploy/ passes them, made local for
scripts/gpu-smoke's training loop."""
from __future__ import annotations

from pathlib import Path

import pytest

from training.deploy_flags import training_flags

ROOT = Path(__file__).resolve().parents[2]


def test_deploy_launcher_flags_are_taken_with_their_paths_made_local(tmp_path):
    module, flags = training_flags(ROOT / "deploy" / "job" / "launcher.yaml", tmp_path)
    assert module.startswith("training.")
    names = [f.split("=")[0] for f in flags]
    assert "--data-dir" not in names and "--epochs" not in names
    # what costs time in the loop: the checkpoint and snapshot writes, on local disk
    by_name = dict(f.split("=", 1) for f in flags if "=" in f)
    assert by_name["--checkpoint-dir"] == str(tmp_path / "checkpoints" / "smoke" / "smoke")
    assert by_name["--snapshot-dir"].startswith(str(tmp_path / "data") + "/")
    assert "$(" not in " ".join(flags)


def test_the_imagenet_overlay_gives_resnet50_its_own_flags(tmp_path):
    """gpu-smoke's real loop takes ResNet-50's flags from the overlay that trains it, not the
    base job's MNIST ones: the snapshots go to the pod's /scratch, made local too."""
    module, flags = training_flags(ROOT / "deploy" / "overlays" / "imagenet" / "kustomization.yaml", tmp_path)
    assert module == "training.resnet50"
    by_name = dict(f.split("=", 1) for f in flags if "=" in f)
    assert by_name["--snapshot-dir"] == str(tmp_path / "scratch" / "snapshots")
    assert "--data-dir" not in by_name and "$(" not in " ".join(flags)


LAUNCHER = """
apiVersion: batch/v1
kind: Job
spec:
  template:
    spec:
      containers:
        - name: launcher
          args: [elastic-run, --min-np=2, --, python, -m, training.resnet50, --data-dir, /data/x,
                 --epochs, "5", --lr=0.1, --checkpoint-dir, /checkpoints/$(JOB_NAME), --datax=/data]
"""


def test_space_separated_values_are_dropped_and_moved_too(tmp_path):
    path = tmp_path / "launcher.yaml"
    path.write_text(LAUNCHER)
    module, flags = training_flags(path, tmp_path / "r")
    assert module == "training.resnet50"
    assert flags == ["--lr=0.1", "--checkpoint-dir", str(tmp_path / "r" / "checkpoints" / "smoke"),
                     f"--datax={tmp_path / 'r' / 'data'}"]


@pytest.mark.parametrize("text, message", [
    ("kind: Job\nspec: {}\n", "no launcher container"),
    (LAUNCHER.replace("python, -m, ", ""), "is not `python -m MODULE ...`"),
])
def test_a_manifest_without_the_command_is_one_line(tmp_path, text, message):
    path = tmp_path / "launcher.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        training_flags(path, tmp_path)
