"""The project's structure as a contract: the four packages never import each other; the rules
they must agree on live once, in ``shared`` (standard library only), which any of them may
import and which imports none of them; no module imports itself back through a cycle; and
``elastic``'s rooms, one per process they run in (``ELASTIC_ROOMS``), import only what their
row allows: code loaded into horovodrun (``driver``), on worker hosts (``worker``) or in the
Kubernetes controller (``scaler``) never imports the launcher (``launch``). The tools are
kept by kind, one folder each (``TOOL_FOLDERS``): the commands a user runs in scripts/, the
benchmarks in scripts/benchmarks/, the Horovod fork's tools in horovod-fork/tools/."""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from tests.projectmodules import TOOL_FOLDERS, project_modules, python_commands

ROOT = Path(__file__).resolve().parents[1]
SHARED = "shared"  # the one package every other may import
# room -> rooms of elastic it may import (besides itself), and the process it runs in
ELASTIC_ROOMS = {
    "errors": set(),
    "environment": set(),  # the package's environment variables (every room may import it)
    "common": {"errors"},  # helpers of every process
    "ssh": {"common", "errors"},  # ssh-bootstrap, and a library of the launcher and the hook
    "sync": {"ssh", "common", "errors"},  # dataset-sync, and a library of the hook
    "prepare": {"sync", "ssh", "common", "errors"},  # the discovery daemon's per-host hook
    "driver": {"common", "errors"},  # inside horovodrun: hvdrun, push, the driver's cores
    "worker": set(),  # on each worker host, around the training (standard library, shared)
    "scaler": {"errors"},  # the Kubernetes controller in the launcher pod
    "leader": {"errors"},  # the launchers' leader election: a pure core and its Lease I/O
    "launch": {"prepare", "driver", "worker", "sync", "ssh", "common", "errors", "leader"},  # elastic-run
    "simulation": {"driver", "common"},  # the driver's cores under seeded faults (a tool)
}


def _imported(name: str, path: Path, node: ast.AST) -> list[str]:
    """The modules an import statement in module ``name`` (file ``path``) may name, relative
    imports (``from .x import y``, ``from . import y``) resolved against its package, and
    ``importlib.import_module("a.b")`` / ``__import__("a.b")`` calls with a literal name."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in ("import_module", "__import__"):
            return [node.args[0].value]
        return []
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        base = node.module or ""
    else:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def _import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (``from a import b`` counts ``a.b`` if a module;
    relative imports count as the absolute ones they stand for)."""
    mods = project_modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            graph[name].update(t for t in _imported(name, path, node) if t in mods and t != name)
    return graph


def test_relative_imports_are_counted():
    graph = _import_graph()
    assert "localcluster.statefiles" in graph["localcluster.kubelet"]  # from .statefiles import ...
    tree = ast.parse("from . import a\nfrom ..b import c\nfrom .d import e\n")
    found = [_imported("p.q.m", Path("m.py"), node) for node in tree.body]
    assert found == [["p.q", "p.q.a"], ["p.b", "p.b.c"], ["p.q.d", "p.q.d.e"]]
    assert _imported("p.q", Path("__init__.py"), tree.body[2]) == ["p.q.d", "p.q.d.e"]


def test_importlib_imports_are_counted():
    """``importlib.import_module("x.y")`` is an edge like ``import x.y``: a cycle or a package
    rule broken through it is seen."""
    tree = ast.parse("import importlib\nimportlib.import_module('p.a')\nimport_module('p.b')\n"
                     "__import__('p.c')\nimportlib.import_module(name)\n")
    found = [t for node in ast.walk(tree) for t in _imported("p.m", Path("m.py"), node)]
    assert found == ["importlib", "p.a", "p.b", "p.c"]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_packages_never_import_each_other():
    crossing = sorted(f"{m} -> {t}" for m, ts in _import_graph().items() for t in ts
                      if m.split(".")[0] != t.split(".")[0] and t.split(".")[0] != SHARED)
    assert crossing == []


def test_shared_imports_only_the_standard_library():
    """``shared`` is what ``discover-hosts`` and the daemon image carry: no third-party
    import, at import time or inside a function, and nothing from the four packages."""
    import sys
    for name, path in project_modules().items():
        if name.split(".")[0] != SHARED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = {node.module.split(".")[0]}
            elif isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            else:
                continue
            assert tops <= set(sys.stdlib_module_names) | {SHARED}, f"{name} imports {tops}"


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "elastic" and len(parts) > 1 else None


def test_every_elastic_room_has_a_row():
    """A new folder of ``elastic`` states which process it runs in and what it may import."""
    rooms = {_room(m) for m in project_modules()} - {None}
    assert sorted(rooms - set(ELASTIC_ROOMS)) == []


def test_elastic_rooms_import_only_downwards():
    wrong = sorted(f"{m} -> {t}" for m, ts in _import_graph().items() for t in ts
                   if _room(m) and _room(t) and _room(t) != _room(m)
                   and _room(t) not in ELASTIC_ROOMS[_room(m)] | {"environment"})
    assert wrong == []


# module -> what it may import inside a function, on a path of its own (never at import time)
LAZY_NON_STDLIB = {"discovery.discover_api": {"yaml"}}  # PyYAML, for a YAML kubeconfig only


@pytest.mark.parametrize("module", ["discovery.discover_hosts", "discovery.discover_api",
                                    "discovery.errors", "shared.runner",
                                    "discovery.hosts"])
def test_client_side_modules_import_only_the_standard_library(module):
    """At import time, only the standard library; inside a function, also what
    ``LAZY_NON_STDLIB`` lists for the module (a path of its own, e.g. a YAML kubeconfig)."""
    import sys
    path = project_modules()[module]
    imported: set[str] = set()
    lazy: set[str] = set()
    tree = ast.parse(path.read_text())
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        (lazy if id(node) in in_function else imported).update(names)
    allowed = set(sys.stdlib_module_names) | {"discovery", SHARED}
    assert imported - allowed == set()
    assert lazy - allowed - LAZY_NON_STDLIB.get(module, set()) == set()


# -- training/: layers, and what may be imported before the data is checked ----------------

# training's layers, lowest first: a module imports (at import time or inside a function)
# only modules of its own layer or of lower ones
TRAINING_LAYERS = (
    # settings, errors and pure helpers: no data, no model
    ("base", {"errors", "environment", "options", "cpus", "seeding", "schedule", "accounting", "metrics",
              "signals", "fingerprint", "trace", "commits", "gpu_defaults", "cuda_arch", "engine_watch",
              "deploy_flags", "sample_log", "sample_audit"}),
    # finding, reading, decoding and ordering samples
    ("data", {"idx", "imagefolder", "datasets", "device_augment", "datagen", "digits", "loaders",
              "sampler", "jpeg_header", "decode_backend"}),
    # the networks and their memory layout
    ("model", {"models", "layout"}),
    # the elastic loop and what only it uses
    ("loop", {"loop", "trainer_base", "world", "step", "evaluation", "checkpointing", "state", "prefetch",
              "checkpoint", "snapshots", "background", "warmup"}),
    # the commands
    ("cli", {"cli", "mnist", "resnet50"}),
)
# what the commands load before they have checked the data (a missing dataset is one line
# and exit 2 within a second, before torch and Horovod are imported)
TRAINING_ENTRIES = ("training.mnist", "training.resnet50", "training.idx", "training.imagefolder")
HEAVY = {"torch", "torchvision", "torchcodec", "horovod", "numpy", "PIL"}
# the only modules that import Horovod at import time (its elastic state and sampler classes
# are their base classes); nothing imports them at import time, so ``import training.loop``
# does not load Horovod: ``loop.run`` imports it once the start-up trace is written
HOROVOD_AT_IMPORT = {"training.sampler", "training.state"}


def _training_imports() -> dict[str, tuple[set[str], set[str]]]:
    """training module -> (what it imports at import time, what inside a function): project
    modules by name, other packages by their top-level name."""
    mods = {m: p for m, p in project_modules().items() if m.split(".")[0] == "training"}
    out: dict[str, tuple[set[str], set[str]]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        in_function = {id(n) for f in ast.walk(tree)
                       if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                       for n in ast.walk(f) if n is not f}
        at_import: set[str] = set()
        lazy: set[str] = set()
        for node in ast.walk(tree):
            targets = _imported(name, path, node)
            found = {t for t in targets if t in mods and t != name}
            if not found and targets:
                found = {targets[0].split(".")[0]}
            (lazy if id(node) in in_function else at_import).update(found)
        out[name] = (at_import, lazy)
    return out


def test_training_layers_and_import_time_rules():
    """training/'s internal rule: (1) layers base -> data -> model -> loop -> cli
    (``TRAINING_LAYERS``): no module imports one of a higher layer, even inside a function;
    (2) what the commands load at import time before the dataset is checked
    (``TRAINING_ENTRIES`` and everything they import at import time, transitively) imports
    none of torch, torchvision, torchcodec, Horovod, NumPy or PIL, so bad input fails fast
    with one line; (3) Horovod is imported at import time only by ``HOROVOD_AT_IMPORT``, and
    no module imports those at import time."""
    imports = _training_imports()
    layer = {f"training.{m}": i for i, (_, members) in enumerate(TRAINING_LAYERS) for m in members}
    layer["training"] = 0
    assert sorted(set(imports) - set(layer)) == [], "a training module without a layer"
    upward = sorted(f"{m} -> {t}" for m, (now, later) in imports.items() for t in now | later
                    if t in layer and layer[t] > layer[m])
    assert upward == []

    seen, todo = set(), list(TRAINING_ENTRIES)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(t for t in imports[m][0] if t in imports)
    heavy = sorted(f"{m} imports {t}" for m in seen for t in imports[m][0] & HEAVY)
    assert heavy == [], "loaded before the data is checked"

    horovod = {m for m, (now, _) in imports.items() if "horovod" in now}
    assert horovod <= HOROVOD_AT_IMPORT
    eager = sorted(f"{m} -> {t}" for m, (now, _) in imports.items() for t in now & HOROVOD_AT_IMPORT)
    assert eager == []


# -- the tools: one folder per kind ---------------------------------------------------------

# the fork's tools by name: here, and in no other folder
FORK_TOOLS = {"build-horovod", "horovod-series", "horovod-wheel-key", "horovod-wheel-source", "horovod-fork-checkout",
              "check-horovod-series", "check-horovod-nccl", "horovod-patch-tests", "test-horovod-upstream",
              "same_code.py", "series_rewrites.py", "weave.py", "weave_edit.py"}


def _entries(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).iterdir() if p.name != "__pycache__")


def test_scripts_holds_commands_and_the_benchmarks_folder():
    """scripts/'s top level is what a user runs: executable files without a suffix, and the
    benchmarks' folder; a module goes to the folder of the command that imports it."""
    wrong = sorted(p.name for p in _entries("scripts")
                   if not (p.is_dir() and p.relative_to(ROOT).as_posix() in TOOL_FOLDERS)
                   and not (p.is_file() and not p.suffix and os.access(p, os.X_OK)))
    assert wrong == []
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "scripts").rglob("*") if p.is_dir()
            and "__pycache__" not in p.parts} <= set(TOOL_FOLDERS)


def test_benchmarks_are_in_their_folder_and_bench_runs_them_there():
    """A benchmark (``bench-*``, ``bench_*.py``) is in scripts/benchmarks/; ``scripts/bench``,
    which runs them, is the one entry at the top, and every benchmark it runs is there."""
    stray = sorted(p.relative_to(ROOT).as_posix() for folder in TOOL_FOLDERS if folder != "scripts/benchmarks"
                   for p in _entries(folder) if re.match(r"bench[-_]", p.name))
    assert stray == []
    # BENCHES' rows: "name": (["command", ...], [quick arguments])
    runs = re.findall(r'^\s+"[\w-]+": \(\["([^"]+)"', (ROOT / "scripts" / "bench").read_text(), re.M)
    assert runs and [r for r in runs if not (r.startswith("scripts/benchmarks/bench-") and (ROOT / r).is_file())] == []


def test_the_fork_tools_are_in_horovod_fork_tools():
    """Every tool of the Horovod fork is in horovod-fork/tools/, and none elsewhere: no file of
    the other tool folders is one of ``FORK_TOOLS`` or named for Horovod (a new tool that
    builds, checks or reads the fork goes to horovod-fork/tools/)."""
    tools = {p.name for p in _entries("horovod-fork/tools")}
    assert sorted(FORK_TOOLS - tools) == []
    elsewhere = sorted(p.relative_to(ROOT).as_posix() for folder in TOOL_FOLDERS if folder != "horovod-fork/tools"
                       for p in (ROOT / folder).rglob("*") if "__pycache__" not in p.parts
                       and (p.name in FORK_TOOLS or "horovod" in p.name))
    assert elsewhere == []


def _pyproject() -> dict:
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_python_commands_are_found():
    """The finder below sees the Python commands and none of the bash ones."""
    commands = python_commands()
    assert {"scripts/bench", "scripts/benchmarks/bench-elastic", "horovod-fork/tools/horovod-patch-tests"} <= commands
    assert not commands & {"scripts/test", "scripts/setup", "horovod-fork/tools/build-horovod"}


def test_every_python_tool_without_a_suffix_is_linted():
    """ruff checks a Python file without a ``.py`` suffix only when pyproject.toml names it:
    every such command of the tool folders is named there."""
    included = set(_pyproject()["tool"]["ruff"]["extend-include"])
    assert sorted(python_commands() - included) == []


def test_every_python_tool_without_a_suffix_is_type_checked():
    """mypy, like ruff, checks a file without a ``.py`` suffix only when it is named in
    [tool.mypy] files; ``scripts_are_modules`` makes each its own module (without it every
    command is ``__main__`` and mypy stops at the second). A new Python command that is not
    named there fails here."""
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy.get("scripts_are_modules") is True
    assert sorted(python_commands() - set(mypy["files"])) == []
