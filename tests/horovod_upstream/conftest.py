"""Horovod v0.28.1's own elastic tests, vendored (see README.md), run against the installed Horovod.

Horovod's ``test/conftest.py`` puts ``test/utils`` on ``sys.path`` (its tests import
``common`` from there); the integration tests import ``elastic_common`` from their own
folder, which upstream's rootdir-less pytest layout put on the path. Both are done here, and
every test below this folder gets the ``horovod_upstream`` marker, so ``pytest -m
horovod_upstream`` (or ``scripts/test-horovod-upstream``) runs them alone.

The suite's warnings-are-errors stays on here, with one exception, scoped to this folder:
Horovod's ``RendezvousServer.stop()`` shuts its HTTP server down without closing the listening
socket (stock 0.28.1 and the patched build alike), and these tests (and ``horovodrun``, which
the integration tests run in-process) never close it, so a ``ResourceWarning: unclosed
<socket.socket ...>`` fires whenever the garbage collector gets to it: inside whatever test
runs then, anywhere in the suite. That one warning is ignored in the tests here (a
``filterwarnings`` mark), and ``_collect_leaked_sockets`` collects the sockets after each
test here, so the leak neither fails a test nor escapes into tests elsewhere.
Likewise ``_shut_horovod_down``: ``test_torch_elastic.py`` calls ``hvd.init()`` in the pytest
process (upstream ran each file in a process of its own) and never shuts it down.
"""
import gc
import os
import sys
import warnings

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
for _sub in ("utils", "integration"):
    _path = os.path.join(_HERE, _sub)
    if _path not in sys.path:
        sys.path.append(_path)


LEAKED_SOCKET = r"ignore:unclosed <socket\.socket:ResourceWarning"


def pytest_collection_modifyitems(config, items):
    """Mark every test under this folder ``horovod_upstream``, and ignore the leaked socket's warning."""
    for item in items:
        if str(item.path).startswith(_HERE + os.sep):
            item.add_marker(pytest.mark.horovod_upstream)
            item.add_marker(pytest.mark.filterwarnings(LEAKED_SOCKET))


@pytest.fixture(autouse=True)
def _collect_leaked_sockets():
    """After each test, garbage-collect the sockets Horovod left open, that warning ignored."""
    yield
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"unclosed <socket\.socket", category=ResourceWarning)
        gc.collect()


@pytest.fixture(autouse=True)
def _shut_horovod_down():
    """After each test, shut down a Horovod the test initialised in this process."""
    yield
    hvd = sys.modules.get("horovod.torch")
    if hvd is not None and hvd.is_initialized():
        hvd.shutdown()
