"""Horovod v0.28.1's own elastic tests, vendored (see README.md), run against the installed Horovod.

Horovod's ``test/conftest.py`` puts ``test/utils`` on ``sys.path`` (its tests import
``common`` from there); the integration tests import ``elastic_common`` from their own
folder, which upstream's rootdir-less pytest layout put on the path. Both are done here, and
every test below this folder gets the ``horovod_upstream`` marker, so ``pytest -m
horovod_upstream`` (or ``horovod-fork/tools/test-horovod-upstream``) runs them alone.

The suite's warnings-are-errors applies here too, with no exception: stock Horovod's
``RendezvousServer.stop()`` left its listening socket open (a ``ResourceWarning: unclosed
<socket.socket ...>`` whenever the garbage collector got to it, in whatever test ran then);
patch 0105 closes it. ``_shut_horovod_down``: ``test_torch_elastic.py`` calls ``hvd.init()``
in the pytest process (upstream ran each file in a process of its own) and never shuts it down.

``_driver_under_test``: the tests run against the driver the venv's ``horovodrun`` runs
(``tests/drivers.py``): the project's ``ElasticDriver`` (``elastic.driver.elastic_driver``, a
subclass of the fork's) where the venv carries the whole series, rebound for each test where
Horovod's tests find it; ``HOROVOD_UPSTREAM_DRIVER=horovod`` runs them on Horovod's own (the
installed build's) driver instead.
"""
import os
import sys

import pytest

from tests import drivers

DRIVER_ENV = "HOROVOD_UPSTREAM_DRIVER"  # "horovod": Horovod's own driver; unset or "project": tests/drivers.py's
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


@pytest.fixture(autouse=True)
def _shut_horovod_down():
    """After each test, shut down a Horovod the test initialised in this process."""
    yield
    hvd = sys.modules.get("horovod.torch")
    if hvd is not None and hvd.is_initialized():
        hvd.shutdown()


@pytest.fixture(autouse=True)
def _driver_under_test(request, monkeypatch):
    """Rebind Horovod's ``ElasticDriver`` to ``drivers.driver_class()`` for the test, where the
    tests find it: the driver module's attribute (what their ``mock.patch`` targets name), the
    name the test module imported, and ``horovod.runner.gloo_run``'s (the integration tests
    call ``_run_elastic`` in this process, and it builds its driver from there). Undone after
    the test. ``HOROVOD_UPSTREAM_DRIVER=horovod``: nothing rebound."""
    choice = os.environ.get(DRIVER_ENV, "")
    if choice not in ("", "project", "horovod"):
        pytest.fail(f"{DRIVER_ENV} must be project or horovod, got {choice!r}", pytrace=False)
    if choice == "horovod":
        return
    from horovod.runner import gloo_run
    from horovod.runner.elastic import driver as driver_module
    horovods = driver_module.ElasticDriver
    ours = drivers.driver_class()
    if ours is horovods:
        return
    monkeypatch.setattr(driver_module, "ElasticDriver", ours)
    monkeypatch.setattr(gloo_run, "ElasticDriver", ours)
    if getattr(request.module, "ElasticDriver", None) is horovods:
        monkeypatch.setattr(request.module, "ElasticDriver", ours)
