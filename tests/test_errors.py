"""Each package has one errors module: no exception class is defined anywhere else (private
control-flow exceptions named ``_...`` inside a module excepted). training/ is its own."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ERRORS = {"discovery": "errors.py", "elastic": "errors.py", "localcluster": "errors.py"}


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
    """``module`` of each ``[project.scripts]`` entry outside training/, and discover-hosts'."""
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    mods = {target.split(":")[0] for target in scripts.values()}
    return sorted(m for m in mods | {"discovery.discover_hosts"} if not m.startswith("training."))


COMMANDS = _console_scripts() + ["elastic.launch.prepare", "elastic.launch.scale_workers"]  # python -m ones


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_ends_in_the_one_runner(module):
    """``main`` returns ``shared.runner.run_main(...)``; no literal exit code 1/2/130."""
    path = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    calls = {ast.unparse(n.func) for n in ast.walk(main) if isinstance(n, ast.Call)}
    imported = {a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "shared.runner"
                for a in n.names}
    assert "run_main" in calls and "run_main" in imported
    literal = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
               and type(n.value.value) is int and n.value.value in (1, 2, 130)]
    assert literal == []


def test_one_argument_parser():
    """No argparse subclass outside ``shared/argparser.py`` (training/ keeps its own contract)."""
    found = [str(p.relative_to(ROOT)) for package in ("discovery", "elastic", "localcluster", "shared")
             for p in (ROOT / package).rglob("*.py") if p.name != "argparser.py"
             and any(isinstance(n, ast.ClassDef) and any("ArgumentParser" in ast.unparse(b) for b in n.bases)
                     for n in ast.walk(ast.parse(p.read_text())))]
    assert found == []
