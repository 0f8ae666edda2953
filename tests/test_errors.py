"""Each package has one errors module: no exception class is defined anywhere else (private
control-flow exceptions named ``_...`` inside a module excepted); every command ends in the
project's one runner and its exit codes are ``shared.exitcodes``' names."""
import ast
from pathlib import Path

import pytest

from tests.projectmodules import TOOL_FOLDERS

ROOT = Path(__file__).resolve().parents[1]
ERRORS = {"discovery": "errors.py", "elastic": "errors.py", "localcluster": "errors.py", "training": "errors.py"}
PACKAGES = tuple(ERRORS)


def _exception_classes(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            bases = [ast.unparse(b) for b in node.bases]
            if any(b.endswith(("Error", "Exception", "Failure", "Interrupted", "Refused", "Timeout", "Unverified",
                                "Fault")) for b in bases):
                names.append(node.name)
    return names


@pytest.mark.parametrize("package", sorted(ERRORS))
def test_exception_classes_live_in_the_packages_errors_module(package):
    stray = {str(p.relative_to(ROOT)): _exception_classes(p) for p in (ROOT / package).rglob("*.py")
             if p.relative_to(ROOT / package).as_posix() != ERRORS[package]}
    assert {p: c for p, c in stray.items() if c} == {}


def _console_scripts() -> list[str]:
    """``module`` of each ``[project.scripts]`` entry of the project's packages, and
    discover-hosts'. Not Horovod's own launcher (``horovodrun-horovod``), which keeps its
    own errors."""
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    mods = {target.split(":")[0] for target in scripts.values()}
    mods = {module for module in mods if module.split(".")[0] in PACKAGES}
    return sorted(mods | {"discovery.discover_hosts"})


# and the python -m ones
COMMANDS = _console_scripts() + ["elastic.prepare.hook", "elastic.scaler.scale_workers", "training.datagen",
                                 "training.digits", "elastic.simulation.cli"]


def _module_tree(module: str) -> ast.Module:
    return ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())


def _reaches_run_main(module: str, function: str, depth: int = 3) -> bool:
    """``function`` of ``module`` calls ``shared.runner.run_main``, or a function of its own
    module or one it imports from the project that does (``depth`` calls deep)."""
    tree = _module_tree(module)
    imports = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
               for a in n.names}
    body = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if body is None:
        return False
    called = {ast.unparse(n.func) for n in ast.walk(body) if isinstance(n, ast.Call)}
    if "run_main" in called and imports.get("run_main") == "shared.runner":
        return True
    if depth == 0:
        return False
    local = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return any(_reaches_run_main(module, name, depth - 1) for name in called & local - {function}) or any(
        _reaches_run_main(imports[name], name, depth - 1) for name in called
        if imports.get(name, "").split(".")[0] in PACKAGES)


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_ends_in_the_one_runner(module):
    """``main`` returns ``shared.runner.run_main(...)`` (itself or through a helper of its
    package: ``training.cli.train_command``); no literal exit code 1/2/130 in the module, and
    ``main`` returns no literal number at all (``shared.exitcodes``' names)."""
    tree = _module_tree(module)
    assert _reaches_run_main(module, "main")
    literal = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
               and type(n.value.value) is int and n.value.value in (1, 2, 130)]
    assert literal == []
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert [n.lineno for n in ast.walk(main) if isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
            and type(n.value.value) is int] == []


def _literal_exit_codes(tree: ast.Module) -> list[int]:
    """Lines that make an exit code from a number: ``sys.exit(1)``, ``os._exit(1)``,
    ``SystemExit(2)``, ``128 + n`` / ``128 - n`` (a signal's code)."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and ast.unparse(n.func) in ("sys.exit", "os._exit", "SystemExit", "exit") \
                and n.args and isinstance(n.args[0], ast.Constant) and type(n.args[0].value) is int:
            found.append(n.lineno)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)) and any(
                isinstance(side, ast.Constant) and side.value == 128 for side in (n.left, n.right)):
            found.append(n.lineno)
    return found


def _python_scripts() -> list[Path]:
    """The tools' Python files (every folder of ``TOOL_FOLDERS``: commands,
    benchmarks, the Horovod fork's tools): ``*.py`` and the commands whose first line names
    python."""
    return sorted(p for folder in TOOL_FOLDERS for p in (ROOT / folder).iterdir() if p.is_file() and (
        p.suffix == ".py" or (not p.suffix and p.read_text(errors="replace").startswith("#!")
                              and "python" in p.read_text(errors="replace").splitlines()[0])))


def test_no_literal_exit_codes():
    """Exit codes are ``shared.exitcodes``' names everywhere in the packages and in the tools'
    Python commands (docs/architecture.md; the bash ones, setup and build-images, excepted)."""
    files = [p for package in (*PACKAGES, "shared") for p in (ROOT / package).rglob("*.py")
             if p.relative_to(ROOT).as_posix() != "shared/exitcodes.py"] + _python_scripts()
    found = {str(p.relative_to(ROOT)): lines for p in files
             for lines in [_literal_exit_codes(ast.parse(p.read_text()))] if lines}
    assert found == {}


def test_the_tools_mains_return_named_exit_codes():
    """The tools' Python commands: ``main`` returns no literal number (``return 2``), as the
    packages' commands do not."""
    found = {}
    for p in _python_scripts():
        main = next((n for n in ast.parse(p.read_text()).body
                     if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
        lines = [n.lineno for n in ast.walk(main) if isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
                 and type(n.value.value) is int] if main else []
        if lines:
            found[p.name] = lines
    assert found == {}


def test_the_python_scripts_are_found():
    names = {p.name for p in _python_scripts()}
    assert {"soak", "bench", "bench-elastic", "bench_detector.py", "horovod-patch-tests", "weave_edit.py"} <= names
    assert "setup" not in names


def test_the_literal_exit_code_finder_finds_them():
    tree = ast.parse("import os, sys\nsys.exit(2)\nos._exit(1)\nraise SystemExit(3)\nx = 128 + n\ny = 128 - r\n"
                     "sys.exit(main())\nz = 127 + n\n")
    assert _literal_exit_codes(tree) == [2, 3, 4, 5, 6]


def test_one_argument_parser():
    """No argparse subclass outside ``shared/argparser.py``."""
    found = [str(p.relative_to(ROOT)) for package in ("discovery", "elastic", "localcluster", "shared", "training")
             for p in (ROOT / package).rglob("*.py") if p.name != "argparser.py"
             and any(isinstance(n, ast.ClassDef) and any("ArgumentParser" in ast.unparse(b) for b in n.bases)
                     for n in ast.walk(ast.parse(p.read_text())))]
    assert found == []
