"""Label and field selectors: the query-string grammar and matching, as a table."""
import pytest

from localcluster.errors import BadRequest
from localcluster.selectors import parse_fields, parse_labels

LABELS = {"app": "hvd", "role": "worker", "tier": "3"}

# (selector, matches LABELS)
LABEL_CASES = [
    ("", True),
    ("app=hvd", True),
    ("app==hvd", True),
    ("app=other", False),
    ("app!=other", True),
    ("missing!=x", True),  # != matches objects without the key
    ("app!=hvd", False),
    ("role in (worker,driver)", True),
    ("role in (driver)", False),
    ("role notin (driver)", True),
    ("missing notin (a)", True),
    ("role notin (worker)", False),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("app=hvd,role=worker", True),
    ("app=hvd, role=driver", False),
    ("tier>2", True),
    ("tier<3", False),
    ("example.com/x!=y", True),
    ("app in (hvd, other),!gone,role", True),
]


@pytest.mark.parametrize("selector,expected", LABEL_CASES)
def test_label_selector_matches(selector, expected):
    assert parse_labels(selector).matches(LABELS) is expected


BAD_LABELS = ["=x", "app=", "app in ()", "app in (a b)", "a b", "app notin x", "!", "app=x,", "bad key!",
              "app=(x)", "-app=x", "app in (a", "tier>x"]


@pytest.mark.parametrize("selector", [s for s in BAD_LABELS if s != "app="])
def test_bad_label_selector_is_400(selector):
    with pytest.raises(BadRequest, match="^unable to parse requirement: ") as info:
        parse_labels(selector)
    assert info.value.code == 400 and repr(selector) in str(info.value)


def test_empty_value_is_allowed():
    assert parse_labels("app=").matches({"app": ""})
    assert not parse_labels("app=").matches({"app": "x"})


POD = {"metadata": {"name": "w-0", "namespace": "ns"}, "spec": {"nodeName": "local"},
       "status": {"phase": "Running", "podIP": "127.1.2.3"}}


@pytest.mark.parametrize("selector,expected", [
    ("metadata.name=w-0", True),
    ("metadata.name==w-0", True),
    ("metadata.name!=w-0", False),
    ("metadata.namespace=ns,status.phase=Running", True),
    ("status.phase!=Running", False),
    ("spec.nodeName=local", True),
    ("spec.nodeName=", False),
    ("status.podIP=127.1.2.3", True),
    ("", True),
])
def test_field_selector_matches(selector, expected):
    assert parse_fields(selector).matches(POD) is expected


@pytest.mark.parametrize("selector", ["metadata.labels=x", "status.phase", "foo=bar"])
def test_bad_field_selector_is_400(selector):
    with pytest.raises(BadRequest, match="field label not supported|invalid field selector"):
        parse_fields(selector)
