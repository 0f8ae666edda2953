"""``python -m elastic.sync.warm SRC``: fill ``dataset-sync``'s hash cache for SRC, copying
nothing, so that the next ``dataset-sync SRC ...`` on this machine only ``stat``s the files.

What a standby launcher runs while it waits to lead (``elastic-run --leader-election
--dataset SRC:DEST``, ``elastic.launch.runner``): hashing ImageNet's 140 GB takes minutes,
and without this a standby that takes over hashes them before it prepares its first host.
The cache is the one ``dataset-sync`` reads (``$XDG_CACHE_HOME/elastic-horovod/dataset-sync``,
``manifest.cached_manifest``), so the daemon's prepare hook in the same pod (the same cache
directory) profits too. ``--symlinks`` as ``dataset-sync``'s (``ELASTIC_SYNC_SYMLINKS``).

Prints one line, ``warm: N files, H hashed, C from the cache in S s``; exit 0. A bad SRC or a
tree ``dataset-sync`` would refuse: one ``error:`` line, exit 2.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from elastic.environment import ELASTIC_SYNC_SYMLINKS
from elastic.errors import ConfigError, ElasticError
from elastic.sync.manifest import SYMLINK_MODES, cached_manifest
from elastic.sync.safety import check_source
from shared.argparser import OneLineParser
from shared.envvars import env_default
from shared.exitcodes import EXIT_OK
from shared.runner import run_main


def warm(src: str, symlinks: str) -> str:
    """Fill the hash cache of ``src``; the line to print. Raises ``ConfigError`` as
    ``dataset-sync`` would for SRC."""
    started = time.monotonic()
    manifest, hashed = cached_manifest(check_source(src), symlinks)
    files = len(manifest.files)
    return (f"warm: {files} files, {hashed} hashed, {files - hashed} from the cache "
            f"in {time.monotonic() - started:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m elastic.sync.warm",
                           description="Fill dataset-sync's hash cache for SRC; copy nothing.")
    parser.add_argument("src", metavar="SRC", help="local dataset directory")
    parser.add_argument("--symlinks", default=env_default(ELASTIC_SYNC_SYMLINKS, "refuse"), choices=SYMLINK_MODES,
                        help="as dataset-sync's (default %(default)s) [ELASTIC_SYNC_SYMLINKS]")
    ns: argparse.Namespace = parser.parse_args(argv)

    def body() -> int:
        print(warm(ns.src, ns.symlinks), flush=True)
        return EXIT_OK

    return run_main("warm", body, usage=ConfigError, failure=ElasticError)


if __name__ == "__main__":
    sys.exit(main())
