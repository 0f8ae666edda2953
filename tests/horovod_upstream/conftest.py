"""Horovod v0.28.1's own elastic tests, vendored (see README.md), run against the installed Horovod.

Horovod's ``test/conftest.py`` puts ``test/utils`` on ``sys.path`` (its tests import
``common`` from there); the integration tests import ``elastic_common`` from their own
folder, which upstream's rootdir-less pytest layout put on the path. Both are done here, and
every test below this folder gets the ``horovod_upstream`` marker, so ``pytest -m
horovod_upstream`` (or ``scripts/test-horovod-upstream``) runs them alone.
"""
import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
for _sub in ("utils", "integration"):
    _path = os.path.join(_HERE, _sub)
    if _path not in sys.path:
        sys.path.append(_path)


def pytest_collection_modifyitems(config, items):
    """Mark every test under this folder ``horovod_upstream``."""
    for item in items:
        if str(item.path).startswith(_HERE + os.sep):
            item.add_marker(pytest.mark.horovod_upstream)
