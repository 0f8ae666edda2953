"""The Dockerfiles cannot be built here; these checks keep them consistent with the clone:
every COPY source exists, Horovod is built by the same script scripts/setup uses (with NCCL),
the torch pins agree with scripts/setup, and the daemon image installs what discovery/
imports."""
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"


def instructions(dockerfile: Path) -> list:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, f"{dockerfile}: dangling line continuation"
    return out


def copy_sources(dockerfile: Path) -> list:
    sources = []
    for word, rest in instructions(dockerfile):
        if word not in ("COPY", "ADD"):
            continue
        parts = rest.split()
        if any(p.startswith("--from=") for p in parts):
            continue
        parts = [p for p in parts if not p.startswith("--")]
        assert len(parts) >= 2, f"{dockerfile.name}: {word} {rest}"
        sources += parts[:-1]
    return sources


def test_every_copy_source_exists_in_the_build_context():
    for name in ("Dockerfile", "Dockerfile.daemon"):
        sources = copy_sources(IMAGES / name)
        assert sources, name
        for src in sources:
            assert (ROOT / src).exists(), f"{name}: COPY source {src} is not in the clone"


def test_horovod_is_built_by_the_setup_script_with_nccl():
    steps = instructions(IMAGES / "Dockerfile")
    copied = [rest for word, rest in steps if word == "COPY" and "scripts/build-horovod" in rest]
    assert copied, "Dockerfile does not COPY scripts/build-horovod"
    builds = [rest for word, rest in steps if word == "RUN" and "build-horovod" in rest]
    assert len(builds) == 1
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in builds[0]
    # scripts/setup uses the same script
    assert "scripts/build-horovod" in (ROOT / "scripts" / "setup").read_text()
    # and the result is checked for NCCL and Gloo in the image
    assert any(word == "RUN" and "nccl_built()" in rest and "gloo_built()" in rest for word, rest in steps)


def test_torch_pins_agree_with_setup():
    setup = (ROOT / "scripts" / "setup").read_text()
    pins = dict(re.findall(r"^(torch_version|torchvision_version)=(\S+)$", setup, re.M))
    args = dict(re.findall(r"^ARG (TORCH_VERSION|TORCHVISION_VERSION)=(\S+)$",
                           (IMAGES / "Dockerfile").read_text(), re.M))
    assert args == {"TORCH_VERSION": pins["torch_version"], "TORCHVISION_VERSION": pins["torchvision_version"]}


def test_the_image_installs_the_project_and_runs_sshd():
    text = (IMAGES / "Dockerfile").read_text()
    assert "openssh-server" in text and "rsync" in text
    sources = copy_sources(IMAGES / "Dockerfile")
    for package in ("discovery", "elastic", "training", "pyproject.toml"):
        assert package in sources
    entry = (IMAGES / "worker-entrypoint.sh").read_text()
    assert "id_ed25519.pub" in entry and "sshd -D" in entry


def _third_party_imports(package: Path) -> set:
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != package.name:
                    found.add(top)
    return found


def _installed_closure(requirements: set) -> set:
    """Distribution names installed by ``pip install requirements`` (as in this venv)."""
    from importlib import metadata
    from packaging.requirements import Requirement

    seen, todo = set(), [r.lower() for r in requirements]
    while todo:
        name = todo.pop().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower())
    return seen


def test_daemon_image_installs_what_discovery_imports_and_nothing_heavy():
    from importlib import metadata

    text = (IMAGES / "Dockerfile.daemon").read_text()
    required = set(re.findall(r'"([A-Za-z0-9_.-]+)[<>=!~][^"]*"', text))
    installed = _installed_closure(required)
    owners = metadata.packages_distributions()
    imports = _third_party_imports(ROOT / "discovery")
    assert imports, "discovery/ has no third-party imports: is it there?"
    missing = sorted(m for m in imports
                     if not {d.lower().replace("_", "-") for d in owners.get(m, [])} & installed)
    assert not missing, f"daemon image does not install {missing} (discovery/ imports them)"
    steps = " ".join(f"{word} {rest}" for word, rest in instructions(IMAGES / "Dockerfile.daemon")
                     if word in ("FROM", "RUN"))
    for heavy in ("torch", "horovod", "nvidia/cuda"):
        assert heavy not in steps
        assert heavy not in installed
    # the same lower bounds as pyproject
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for spec in re.findall(r'"([A-Za-z0-9_.-]+[<>=!~][^"]*)"', text):
        assert spec in deps, f"Dockerfile.daemon pins {spec}, pyproject says {deps}"
    assert copy_sources(IMAGES / "Dockerfile.daemon")[0] == "discovery"
