"""``python -m elastic.launch.hvdrun ARGS``: horovodrun, with the driver fed by push discovery.

``elastic-run`` starts this instead of the ``horovodrun`` script. With ``DISCOVERY_URL`` in
the environment, the Horovod driver's ``--host-discovery-script`` is replaced by an
in-process ``elastic.launch.push.DaemonDiscovery`` on that daemon: no process per poll, and
the driver hears of a change as soon as the daemon serves it (Horovod's own loop runs the
script once a second through a Python middleman). Without ``DISCOVERY_URL`` this is plain
horovodrun. Everything else (arguments, exit code) is horovodrun's.

The hook: horovodrun's launcher builds its discovery as
``horovod.runner.elastic.discovery.HostDiscoveryScript(script, slots)``; ``main`` swaps
that name for a factory before handing over to ``horovod.runner.launch.run_commandline``.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from elastic.launch.push import DaemonDiscovery

DISCOVERY_URL_ENV = "DISCOVERY_URL"


def install(url: str) -> None:
    """Make horovodrun's elastic driver discover hosts from the daemon at ``url``."""
    from horovod.runner.elastic import discovery

    def push_discovery(_script: str, slots: int) -> DaemonDiscovery:
        found = DaemonDiscovery(url, default_slots=slots or 1)
        found.start()
        return found

    discovery.HostDiscoveryScript = push_discovery


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    url = os.environ.get(DISCOVERY_URL_ENV)
    if url:
        install(url)
    from horovod.runner.launch import run_commandline
    sys.argv = ["horovodrun", *argv]
    run_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
