"""The driver's event kinds are one contract (``shared.event_kinds``): every kind the driver
emits, in the Horovod this project builds and in ``elastic.driver``, is a ``Kind`` whose
declared detail is what the driver writes; every ``Kind`` is emitted somewhere; and a kind a
reader does not know stays a readable string."""
from __future__ import annotations

import ast
import importlib.util
import typing
from pathlib import Path

from elastic.launch import stall, timeline
from shared.driver_events import Record, parse_line
from shared.event_kinds import DETAILS, Kind

ROOT = Path(__file__).resolve().parents[2]


def _driver_sources() -> list[Path]:
    """The built Horovod's runner (where its driver emits) and the project's driver package,
    found without importing Horovod."""
    spec = importlib.util.find_spec("horovod")
    assert spec is not None and spec.submodule_search_locations, "Horovod is not installed"
    horovod = Path(next(iter(spec.submodule_search_locations)))
    return sorted((horovod / "runner").rglob("*.py")) + sorted((ROOT / "elastic" / "driver").glob("*.py"))


def _kind_argument(node: ast.expr) -> str | None:
    """The kind an ``emit`` call names: a string literal, or ``Kind.NAME.value``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (isinstance(node, ast.Attribute) and node.attr == "value" and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "Kind"):
        return Kind[node.value.attr].value
    return None


def _emits() -> list[tuple[str, str, set[str], bool]]:
    """(where, kind, keyword fields, has **fields) for every ``emit(KIND, ...)`` call."""
    found = []
    for path in _driver_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "emit" and node.args):
                continue
            kind = _kind_argument(node.args[0])
            assert kind is not None, f"{path}:{node.lineno}: an emit whose kind is not a literal or a Kind"
            fields = {k.arg for k in node.keywords if k.arg is not None}
            found.append((f"{path.name}:{node.lineno}", kind, fields, any(k.arg is None for k in node.keywords)))
    return found


def test_every_emitted_kind_is_a_kind_with_the_fields_it_declares():
    emits = _emits()
    assert len(emits) > 30, "the driver's emit calls were not found"
    known = {k.value for k in Kind}
    assert sorted({f"{where} {kind}" for where, kind, _, _ in emits if kind not in known}) == []
    wrong = []
    for where, kind, fields, spread in emits:
        declared = set(typing.get_type_hints(DETAILS[Kind(kind)]))
        if (fields - declared) if spread else (fields != declared):
            wrong.append(f"{where} {kind}: writes {sorted(fields)}, declared {sorted(declared)}")
    assert wrong == []


def test_every_kind_is_emitted_and_has_a_detail():
    emitted = {kind for _, kind, _, _ in _emits()}
    assert sorted(k.value for k in Kind if k.value not in emitted) == []
    assert sorted(k.value for k in Kind if k not in DETAILS) == []


def test_a_kind_and_its_string_are_one_value():
    assert Kind.RESET == "reset" and "reset" in {Kind.RESET} and {Kind.RESET: 1}["reset"] == 1
    assert Record(1.0, "progress").kind is Kind.PROGRESS
    assert parse_line('{"time": 1, "kind": "worker_exit", "detail": {}}').kind is Kind.WORKER_EXIT


def test_an_unknown_kind_stays_readable():
    """A newer driver's kind: kept as its string, and the readers pass it by."""
    rec = parse_line('{"time": 5, "kind": "brand_new", "detail": {"host": "h"}}')
    assert rec == Record(5.0, "brand_new", {"host": "h"}) and type(rec.kind) is str
    reset = Record(1.0, Kind.RESET, {"world_size": 2, "rendezvous": 1, "hosts": ["a:2"], "new_workers": 2})
    assert [(e.kind, e.text) for e in timeline.driver_events(0.0, [reset, rec])] == [
        ("world", "world size 2 (2 new workers)")]
    watch = stall.Activity(started=0.0)
    watch.observe([reset, rec])
    assert watch.driver is not None and watch.driver.text == "reset to world size 2"
