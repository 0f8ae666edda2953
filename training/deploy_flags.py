"""The training flags deploy/ gives the trainer, for a run outside a cluster (scripts/gpu-smoke).

``training_flags(path, root)`` reads the launcher Job's manifest (``deploy/job/launcher.yaml``)
or an overlay's ``kustomization.yaml`` whose patch restates the launcher's args
(``deploy/overlays/imagenet``: ResNet-50's flags, not the base's MNIST ones), takes the
training command after elastic-run's ``--``
(``python -m training.<name> FLAG...``) and returns ``(module, flags)``: the flags as deploy/
passes them, except the data and the length of the run (``--data-dir``, ``--epochs``: the
caller brings its own), with every path in the pod's volumes (``/data``, ``/checkpoints``)
moved under ``root`` and every ``$(VAR)`` of the pod's environment replaced by ``smoke``, so
the same checkpoint and snapshot writes happen on local disk. ``ValueError`` with one line
when the manifest has no such command.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

DROPPED = ("--data-dir", "--epochs")
POD_VOLUMES = ("/data", "/checkpoints", "/scratch")


def _local(value: str, root: Path) -> str:
    value = re.sub(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", "smoke", value)
    for mount in POD_VOLUMES:
        if value == mount or value.startswith(mount + "/"):
            return str(root / value.lstrip("/"))
    return value


def _documents(path: Path) -> list[dict]:
    """The manifest's objects; for a kustomization, also those its inline patches restate."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    patches = [p.get("patch") for d in docs if d.get("kind") == "Kustomization"
               for p in d.get("patches") or [] if isinstance(p, dict)]
    for text in patches:
        if isinstance(text, str):
            docs += [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    return docs


def training_flags(launcher_yaml: Path, root: Path) -> tuple[str, list[str]]:
    """deploy/'s trainer module and flags, made local (module docstring)."""
    for doc in _documents(launcher_yaml):
        containers = (doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [])
        for container in containers:
            args = [str(a) for a in container.get("args") or []]
            if container.get("name") != "launcher" or "--" not in args:
                continue
            command = args[args.index("--") + 1:]
            if command[:2] != ["python", "-m"] or len(command) < 3:
                raise ValueError(f"{launcher_yaml}: the launcher's training command is not "
                                 f"`python -m MODULE ...`: {' '.join(command[:3])}")
            flags: list[str] = []
            skip = False
            for arg in command[3:]:
                name, sep, value = arg.partition("=")
                if skip or name in DROPPED:
                    skip = not skip and name in DROPPED and not sep  # `--epochs 10`: its value too
                    continue
                flags.append(f"{name}={_local(value, root)}" if sep else _local(arg, root))
            return command[2], flags
    raise ValueError(f"{launcher_yaml}: no launcher container running `elastic-run ... -- python -m ...`")
