"""Helpers shared by the ``ssh-bootstrap`` and ``dataset-sync`` command lines.

``env_default(name, fallback)`` and ``env_int`` read a flag's environment variable
(``shared.envvars``); ``hosts_from_args`` turns
``--hosts``/``--hosts-file``/``--host`` (or ``discover-hosts``) into a host list. The parser
and the command runner are the project's one copy: ``shared.argparser.OneLineParser`` and
``shared.runner.run_main`` (``ConfigError`` 2, ``Interrupted`` 128+N, other ``ElasticError`` 1).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import overload

from elastic.common.hostlist import Host, parse_entry, parse_host_list, parse_hosts_file
from elastic.errors import ConfigError
from shared import envvars

env_default = envvars.env_default


@overload
def env_int(name: str, fallback: int) -> int: ...
@overload
def env_int(name: str, fallback: None = None) -> int | None: ...
def env_int(name: str, fallback: int | None = None) -> int | None:
    """An integer environment variable (``fallback`` when unset or empty); ``ConfigError``
    naming it if it is not an integer (``shared.envvars.env_int``)."""
    return envvars.env_int(name, fallback, ConfigError)


def hosts_from_args(hosts: str | None, hosts_file: str | None, host: str | None,
                    discover: Callable[[], list[Host]], default_slots: int = 1) -> list[Host]:
    """Choose the host list: exactly one of the three flags, else ``discover()``."""
    given = [flag for flag, value in (("--hosts", hosts), ("--hosts-file", hosts_file), ("--host", host)) if value]
    if len(given) > 1:
        raise ConfigError(f"give only one of {', '.join(given)}")
    if host:
        return [parse_entry(host, default_slots)]
    if hosts:
        return parse_host_list(hosts, default_slots)
    if hosts_file:
        try:
            text = Path(hosts_file).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read hosts file {hosts_file}: {exc.strerror}") from exc
        parsed = parse_hosts_file(text, default_slots)
        if not parsed:
            raise ConfigError(f"hosts file {hosts_file} lists no hosts")
        return parsed
    return discover()


def setup_logging(verbose: bool) -> None:
    """Log to stderr: INFO, or DEBUG with ``verbose``; paramiko and urllib3 stay quiet."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(name)s: %(message)s")
    logging.getLogger("paramiko").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    logging.getLogger("urllib3").setLevel(logging.DEBUG if verbose else logging.ERROR)  # its retry chatter
