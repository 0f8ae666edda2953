"""The three patch flavours, as tables of (target, patch, result)."""
import json

import pytest

from localcluster import patch
from localcluster.errors import BadRequest, Invalid, UnsupportedMediaType

MERGE_CASES = [
    ({"a": 1}, {"a": 2}, {"a": 2}),
    ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"y": None, "z": 3}}, {"a": {"x": 1, "z": 3}}),
    ({"l": [1, 2]}, {"l": [3]}, {"l": [3]}),
    ({}, {"m": {"n": None}}, {"m": {}}),
]


@pytest.mark.parametrize("target,body,expected", MERGE_CASES)
def test_merge_patch(target, body, expected):
    before = json.dumps(target)
    assert patch.merge_patch(target, body) == expected
    assert json.dumps(target) == before  # not mutated


JSON_CASES = [
    ({"a": 1}, [{"op": "replace", "path": "/a", "value": 2}], {"a": 2}),
    ({"a": 1}, [{"op": "add", "path": "/b", "value": [1]}], {"a": 1, "b": [1]}),
    ({"l": [1, 3]}, [{"op": "add", "path": "/l/1", "value": 2}], {"l": [1, 2, 3]}),
    ({"l": [1]}, [{"op": "add", "path": "/l/-", "value": 2}], {"l": [1, 2]}),
    ({"a": 1, "b": 2}, [{"op": "remove", "path": "/a"}], {"b": 2}),
    ({"a": {"x": 1}}, [{"op": "move", "from": "/a/x", "path": "/y"}], {"a": {}, "y": 1}),
    ({"a": 1}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": 1, "b": 1}),
    ({"a": 1}, [{"op": "test", "path": "/a", "value": 1}, {"op": "remove", "path": "/a"}], {}),
    ({"m": {"a/b": 1}}, [{"op": "remove", "path": "/m/a~1b"}], {"m": {}}),
]


@pytest.mark.parametrize("target,ops,expected", JSON_CASES)
def test_json_patch(target, ops, expected):
    assert patch.json_patch(target, ops) == expected


@pytest.mark.parametrize("ops", [
    [{"op": "replace", "path": "/missing", "value": 1}],
    [{"op": "remove", "path": "/a/b"}],
    [{"op": "test", "path": "/a", "value": 2}],
    [{"op": "frobnicate", "path": "/a"}],
    [{"path": "/a"}],
    [{"op": "add", "path": "/l/9", "value": 1}],
])
def test_bad_json_patch_is_422(ops):
    with pytest.raises(Invalid, match="^json patch: "):
        patch.json_patch({"a": 1, "l": []}, ops)


def test_strategic_merge_merges_conditions_by_type():
    ready, scheduled = {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}
    target = {"status": {"conditions": [ready, scheduled]}}
    out = patch.strategic_merge_patch(target, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}, scheduled]


def test_strategic_merge_directives():
    target = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
              "metadata": {"finalizers": ["f1"], "labels": {"k": "v"}}}
    out = patch.strategic_merge_patch(target, {
        "spec": {"containers": [{"name": "b", "$patch": "delete"}, {"name": "a", "image": "z"}]},
        "metadata": {"finalizers": ["f2"], "labels": {"$patch": "replace", "n": "m"}}})
    assert out["spec"]["containers"] == [{"name": "a", "image": "z"}]
    assert out["metadata"] == {"finalizers": ["f1", "f2"], "labels": {"n": "m"}}


def test_apply_picks_by_content_type():
    target = {"metadata": {"labels": {"a": "1"}}}
    merged = patch.apply("application/merge-patch+json", target, b'{"metadata":{"labels":{"a":null}}}')
    assert merged == {"metadata": {"labels": {}}}
    json_patched = patch.apply("application/json-patch+json; charset=utf-8", target,
                               b'[{"op":"add","path":"/metadata/labels/b","value":"2"}]')
    assert json_patched["metadata"]["labels"] == {"a": "1", "b": "2"}
    with pytest.raises(UnsupportedMediaType, match="the body of the request was in an unknown format - accepted"):
        patch.apply("application/apply-patch+yaml", target, b"{}")
    with pytest.raises(BadRequest, match="error decoding patch: Expecting property name enclosed in"):
        patch.apply("application/merge-patch+json", target, b"{nope")
