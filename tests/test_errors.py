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
