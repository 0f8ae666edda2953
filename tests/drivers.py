"""Which elastic driver a test runs in its own process: the one the venv's ``horovodrun`` runs.

``scripts/setup`` makes ``horovodrun`` run the project's driver
(``elastic.driver.elastic_driver.ElasticDriver``, through ``elastic.driver.hvdrun:main``) when
the venv carries the whole series, and Horovod's own on another wheel (``ELASTIC_HOROVOD_WHEELS``:
stock Horovod or a prefix of the series, which ``horovod-fork/tools/horovod-wheel-source``
remembers as ``<venv>/.horovod-wheels``): the project's driver subclasses the whole series'
driver. A test that builds a driver itself (the harness of tests/runtime/test_patch_units.py)
takes ``driver_class()``, so it checks what a user's ``horovodrun`` runs.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

WHEELS_STAMP = ".horovod-wheels"  # horovod-fork/tools/horovod-wheel-source's


def whole_series(prefix: str | None = None) -> bool:
    """Whether the venv at ``prefix`` (default: this interpreter's) carries the whole series'
    Horovod, i.e. was not set up on a wheel of ``ELASTIC_HOROVOD_WHEELS``."""
    return not (Path(sys.prefix if prefix is None else prefix) / WHEELS_STAMP).exists()


def driver_class() -> type[Any]:
    """The ``ElasticDriver`` the venv's ``horovodrun`` builds: the project's on the whole
    series, Horovod's (the installed build's) otherwise."""
    if whole_series():
        from elastic.driver.elastic_driver import ElasticDriver
        return ElasticDriver
    from horovod.runner.elastic.driver import ElasticDriver as HorovodDriver
    return HorovodDriver
