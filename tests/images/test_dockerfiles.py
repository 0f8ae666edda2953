"""Static checks that keep the Dockerfiles consistent with the clone (the images themselves are
built and run by the other tests here): every COPY source exists and is in the build context,
Horovod is built by the same script scripts/setup uses (with NCCL against torch's own NCCL),
the torch, Horovod and CUDA versions agree with scripts/setup and torch's wheel, the bases are
build arguments, and the daemon image installs exactly what discovery/ imports, pinned."""
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
    copied = [rest for word, rest in steps if word == "COPY" and "horovod-fork/tools/build-horovod" in rest]
    assert copied, "Dockerfile does not COPY horovod-fork/tools/build-horovod"
    builds = [rest for word, rest in steps if word == "RUN" and "build-horovod" in rest]
    assert len(builds) == 1
    assert "HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS" in builds[0]
    assert "ARG HOROVOD_GPU_OPERATIONS=NCCL" in {f"{w} {r}" for w, r in steps}  # NCCL by default
    # Horovod links the NCCL of torch's nvidia-nccl wheel, not a second one from the base
    assert "HOROVOD_NCCL_HOME=$nccl" in builds[0] and "import nvidia.nccl" in builds[0]
    # scripts/setup uses the same script
    assert "horovod-fork/tools/build-horovod" in (ROOT / "scripts" / "setup").read_text()
    # and the result is checked for Gloo (and NCCL when built for it) in the image
    assert any(word == "RUN" and "nccl_built()" in rest and "gloo_built()" in rest for word, rest in steps)


def _setup_pins() -> dict:
    setup = (ROOT / "scripts" / "setup").read_text()
    return dict(re.findall(r"^(torch_version|torchvision_version|torchcodec_version|horovod_version)=(\S+)$",
                           setup, re.M))


def test_torch_and_horovod_pins_agree_with_setup():
    pins = _setup_pins()
    args = re.findall(r"^ARG (TORCH_VERSION|TORCHVISION_VERSION|TORCHCODEC_VERSION|HOROVOD_VERSION)=(\S+)$",
                      (IMAGES / "Dockerfile").read_text(), re.M)
    assert set(args) == {("TORCH_VERSION", pins["torch_version"]), ("TORCHVISION_VERSION", pins["torchvision_version"]),
                         ("TORCHCODEC_VERSION", pins["torchcodec_version"]),
                         ("HOROVOD_VERSION", pins["horovod_version"])}
    # the runtime stage installs the pinned torchcodec, and not a second, unpinned one
    dockerfile = (IMAGES / "Dockerfile").read_text()
    assert '"torchcodec==${TORCHCODEC_VERSION}"' in dockerfile
    assert "torchcodec" in (IMAGES / "runtime-requirements").read_text()


def test_the_cuda_base_is_the_cuda_release_torchs_wheel_is_built_for():
    """One CUDA stack: the base's CUDA major.minor is the one torch's wheel requires."""
    from importlib import metadata

    from packaging.requirements import Requirement

    assert metadata.version("torch").split("+")[0] == _setup_pins()["torch_version"]
    toolkit = [Requirement(r) for r in metadata.requires("torch") or [] if r.startswith("cuda-toolkit")]
    assert toolkit, "torch's wheel names no cuda-toolkit: is it a CUDA build?"
    wanted = str(toolkit[0].specifier).lstrip("=")
    cuda = re.search(r"^ARG CUDA_VERSION=(\S+)$", (IMAGES / "Dockerfile").read_text(), re.M).group(1)
    assert cuda.split(".")[:2] == wanted.split(".")[:2], f"base CUDA {cuda}, torch's wheel wants {wanted}"


def test_the_bases_are_build_arguments_and_nothing_else_differs():
    text = (IMAGES / "Dockerfile").read_text()
    steps = instructions(IMAGES / "Dockerfile")
    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms == ["${BUILD_BASE} AS build", "${RUNTIME_BASE}"]
    assert re.search(r"^ARG BUILD_BASE=nvidia/cuda:\$\{CUDA_VERSION\}-devel-ubuntu24\.04$", text, re.M)
    assert re.search(r"^ARG RUNTIME_BASE=nvidia/cuda:\$\{CUDA_VERSION\}-base-ubuntu24\.04$", text, re.M)
    daemon = [rest for word, rest in instructions(IMAGES / "Dockerfile.daemon") if word == "FROM"]
    assert daemon == ["${DAEMON_BASE}"]
    # scripts/build-images passes only bases, pip settings, the GPU operations and the key of
    # the set-up's Horovod wheel (horovod-fork/tools/horovod-wheel-key), which a CUDA build never has
    script = (ROOT / "scripts" / "build-images").read_text()
    passed = set(re.findall(r'--build-arg "([A-Z_]+)=', script))
    assert passed == {"BUILD_BASE", "RUNTIME_BASE", "DAEMON_BASE", "HOROVOD_GPU_OPERATIONS", "PIP_EXTRA_INDEX_URL",
                      "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "HOROVOD_WHEEL_KEY"}


def test_the_image_installs_the_project_and_runs_sshd_with_per_container_host_keys():
    text = (IMAGES / "Dockerfile").read_text()
    assert "openssh-server" in text and "rsync" in text
    install = [rest for word, rest in instructions(IMAGES / "Dockerfile") if word == "RUN" and "openssh-server" in rest]
    assert len(install) == 1 and "rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*" in install[0]
    sources = copy_sources(IMAGES / "Dockerfile")
    for package in ("discovery", "elastic", "training", "shared", "pyproject.toml"):
        assert package in sources
    assert "localcluster" not in sources
    entry = (IMAGES / "worker-entrypoint.sh").read_text()
    assert "id_ed25519.pub" in entry and "sshd -D" in entry and "ssh-keygen -q -t ed25519" in entry


def test_sshd_settings():
    conf = dict(line.split(None, 1) for line in (IMAGES / "sshd_config").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    assert conf["PasswordAuthentication"] == "no" and conf["KbdInteractiveAuthentication"] == "no"
    assert conf["AuthenticationMethods"] == "publickey"
    assert conf["X11Forwarding"] == "no" and conf["AllowTcpForwarding"] == "no"
    assert conf["MaxStartups"] == "100:30:200"
    assert conf["HostKey"] == "/etc/ssh/ssh_host_ed25519_key"
    # a frozen or vanished client ends its session in seconds (the job's ssh_config has
    # ServerAlive* for the other direction)
    assert int(conf["ClientAliveInterval"]) * int(conf["ClientAliveCountMax"]) <= 10


def test_one_root_dockerignore_admits_what_the_images_copy_and_no_keys():
    assert not list(IMAGES.glob("*.dockerignore")), "per-Dockerfile ignore files are read by BuildKit only"
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"  # everything is out unless named
    admitted = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    for name in ("Dockerfile", "Dockerfile.daemon"):
        for src in copy_sources(IMAGES / name):
            parts = Path(src).parts
            assert any("/".join(parts[:i]) in admitted for i in range(1, len(parts) + 1)), f"{src} not in the context"
    assert not {a for a in admitted if a.startswith(("keys", ".git", ".venv"))}
    assert "**/id_ed25519" in lines


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
                if top not in sys.stdlib_module_names and top not in (package.name, "shared"):
                    found.add(top)
    return found


def _daemon_pins() -> dict:
    pins = {}
    for line in (IMAGES / "daemon-requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"daemon-requirements.txt: {line!r} is not pinned with =="
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_daemon_image_installs_what_discovery_imports_pinned_and_nothing_heavy():
    from importlib import metadata

    from packaging.requirements import Requirement

    text = (IMAGES / "Dockerfile.daemon").read_text()
    assert "--no-deps -r /opt/elastic-horovod/requirements.txt" in text and "pip check" in text
    pins = _daemon_pins()
    owners = metadata.packages_distributions()
    imports = _third_party_imports(ROOT / "discovery")
    assert imports, "discovery/ has no third-party imports: is it there?"
    missing = sorted(m for m in imports
                     if not {d.lower().replace("_", "-") for d in owners.get(m, [])} & set(pins))
    assert not missing, f"daemon image does not install {missing} (discovery/ imports them)"
    for heavy in ("torch", "horovod", "numpy", "paramiko"):
        assert heavy not in pins
    steps = " ".join(f"{word} {rest}" for word, rest in instructions(IMAGES / "Dockerfile.daemon")
                     if word in ("FROM", "RUN"))
    assert "nvidia/cuda" not in steps and "torch" not in steps
    # each pin satisfies pyproject's requirement for the same package
    import tomllib
    deps = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    for req in deps:
        name = req.name.lower().replace("_", "-")
        if name in pins:
            assert req.specifier.contains(pins[name]), f"daemon pins {name}=={pins[name]}, pyproject wants {req}"
    assert copy_sources(IMAGES / "Dockerfile.daemon")[1:3] == ["discovery", "shared"]  # shared: its one client


def test_the_worker_image_asks_the_gpu_runtime_for_the_video_engines_too():
    """The CUDA base keeps NVIDIA_DRIVER_CAPABILITIES=compute,utility; nvJPEG's hardware
    decoder (--augment-on-device) needs the driver's video libraries, mounted only for
    ``video``: the last stage (the image that runs) sets all three."""
    steps = instructions(IMAGES / "Dockerfile")
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    values = [part.split("=", 1)[1] for word, rest in steps[last:] if word == "ENV"
              for part in rest.split() if part.startswith("NVIDIA_DRIVER_CAPABILITIES=")]
    assert len(values) == 1, values
    assert {"compute", "utility", "video"} <= set(values[0].split(",")), values
