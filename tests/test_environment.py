"""Every environment variable a process of the project reads or writes is a constant in one
registry: ``shared.environment`` for those that cross a package's border, else its package's
``environment`` module. No other module spells a variable's name."""
from __future__ import annotations

import ast
import re

from tests.projectmodules import project_modules

REGISTRIES = {"shared.environment", "discovery.environment", "elastic.environment", "training.environment",
              "localcluster.environment"}
# what an environment variable's name looks like here (the project's, Horovod's, the runtime's)
NAME = re.compile(r"^(DISCOVERY|DISCOVER|ELASTIC|HOROVOD|LOCAL_CLUSTER|TRAINING|OMP|XDG|KUBERNETES|NCCL)_[A-Z0-9_]+$")


def _registered() -> dict[str, str]:
    """name -> registry module; each constant's value is its own name."""
    found: dict[str, str] = {}
    modules = project_modules()
    for registry in sorted(REGISTRIES):
        for node in ast.parse(modules[registry].read_text()).body:
            if isinstance(node, ast.Assign):
                [target] = node.targets
                assert isinstance(target, ast.Name) and isinstance(node.value, ast.Constant)
                assert node.value.value == target.id, f"{registry}.{target.id} is {node.value.value!r}"
                assert target.id not in found, f"{target.id} in {found.get(target.id)} and {registry}"
                found[target.id] = registry
    return found


def test_every_registry_exists_and_names_each_variable_once():
    assert len(_registered()) > 80


def test_no_module_but_a_registry_spells_a_variables_name():
    registered = _registered()
    spelled = []
    for module, path in project_modules().items():
        if module in REGISTRIES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in registered or NAME.match(node.value)):
                spelled.append(f"{module}:{node.lineno} {node.value}")
    assert spelled == []


def test_a_package_registry_holds_only_its_own_variables():
    """A name read by two packages lives in shared.environment, not in one package's registry."""
    registered = _registered()
    modules = project_modules()
    users: dict[str, set[str]] = {}
    for module, path in modules.items():
        text = path.read_text()
        for name in registered:
            if re.search(rf"\b{name}\b", text) and module not in REGISTRIES:
                users.setdefault(name, set()).add(module.split(".")[0])
    crossing = sorted(f"{n} ({registered[n]}) used by {sorted(p)}" for n, p in users.items()
                      if len(p) > 1 and registered[n] != "shared.environment")
    assert crossing == []
