"""The horovodrun command line of an elastic job: a pure function of the launcher's options.

``HorovodrunOptions`` checks its values when it is made (``ConfigError`` naming the bad
value); ``build_horovodrun_command(options, training_command)`` returns the argv list and
never touches the file system, the network or the environment.

Environment for the training processes is not put on the command line: horovodrun (Gloo)
exports the whole environment it runs in to every worker, so the launcher passes
``options.env`` through horovodrun's environment (see ``elastic.launch.plan.horovodrun_env``).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from elastic.errors import ConfigError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IFACE = re.compile(r"^[A-Za-z0-9_.:@-]+$")


@dataclass(frozen=True)
class HorovodrunOptions:
    """What the launcher asks of horovodrun.

    discovery_script: absolute path of ``discover-hosts`` (horovodrun runs it every second).
    min_np / max_np: the world size bounds; ``np`` the size to start with (default min_np).
    slots_per_host: only when every host should get that many slots regardless of what
        discovery says (horovodrun's ``--slots-per-host``); None leaves it to discovery.
    elastic_timeout: seconds horovodrun waits for min_np slots (start and after a loss).
    reset_limit: most resets before the job fails; None for no limit.
    cooldown_range: (low, high) seconds a failed host stays blacklisted, so one that comes
        back is not shut out for the rest of the job.
    ssh_port / ssh_identity_file: how horovodrun reaches the hosts.
    network_interfaces: NICs for Horovod's traffic (e.g. ("lo",) on one machine).
    start_timeout: seconds for the workers to start (horovodrun's --start-timeout).
    env: extra variables for the training processes (exported through the environment).
    horovodrun: the horovodrun executable.
    launcher: argv that runs horovodrun instead of ``horovodrun`` (e.g. ``python -m
        elastic.driver.hvdrun``: the same arguments, push discovery); empty for the script.
    verbose: horovodrun's --verbose.
    """

    discovery_script: str
    min_np: int
    max_np: int | None = None
    np: int | None = None
    slots_per_host: int | None = None
    elastic_timeout: int = 600
    reset_limit: int | None = None
    cooldown_range: tuple[int, int] | None = (10, 60)
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    network_interfaces: tuple[str, ...] = ()
    start_timeout: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    horovodrun: str = "horovodrun"
    verbose: bool = False
    launcher: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.discovery_script.startswith("/"):
            raise ConfigError(f"discovery script must be an absolute path, got {self.discovery_script!r}")
        _positive("--min-np", self.min_np)
        if self.max_np is not None:
            _positive("--max-np", self.max_np)
            if self.max_np < self.min_np:
                raise ConfigError(f"--max-np {self.max_np} is below --min-np {self.min_np}")
        if self.np is not None:
            _positive("--np", self.np)
            if self.np < self.min_np or (self.max_np is not None and self.np > self.max_np):
                raise ConfigError(f"--np {self.np} is outside [--min-np {self.min_np}, --max-np {self.max_np}]")
        if self.slots_per_host is not None:
            _positive("--slots-per-host", self.slots_per_host)
        _positive("--elastic-timeout", self.elastic_timeout)
        if self.reset_limit is not None and self.reset_limit < 0:
            raise ConfigError(f"--reset-limit must be 0 or more, got {self.reset_limit}")
        if self.cooldown_range is not None:
            low, high = self.cooldown_range
            if low < 1 or high < low:
                raise ConfigError(f"--blacklist-cooldown-range needs 1 <= LOW <= HIGH, got {low} {high}")
        if self.ssh_port is not None and not 0 < self.ssh_port < 65536:
            raise ConfigError(f"--ssh-port must be 1..65535, got {self.ssh_port}")
        for nic in self.network_interfaces:
            if not _IFACE.match(nic):
                raise ConfigError(f"bad network interface name {nic!r}")
        if self.start_timeout is not None:
            _positive("--start-timeout", self.start_timeout)
        for name in self.env:
            if not _ENV_NAME.match(name):
                raise ConfigError(f"bad environment variable name {name!r}")


def _positive(flag: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")


def build_horovodrun_command(options: HorovodrunOptions, training_command: Sequence[str]) -> list[str]:
    """The argv that runs ``training_command`` elastically under horovodrun.

    Raises ConfigError when ``training_command`` is empty.
    """
    if not training_command:
        raise ConfigError("no training command given (put it after --)")
    argv = [*(options.launcher or (options.horovodrun,)),
            "-np", str(options.np if options.np is not None else options.min_np),
            "--min-np", str(options.min_np)]
    if options.max_np is not None:
        argv += ["--max-np", str(options.max_np)]
    argv += ["--host-discovery-script", options.discovery_script]
    if options.slots_per_host is not None:
        argv += ["--slots-per-host", str(options.slots_per_host)]
    argv += ["--elastic-timeout", str(options.elastic_timeout)]
    if options.reset_limit is not None:
        argv += ["--reset-limit", str(options.reset_limit)]
    if options.cooldown_range is not None:
        argv += ["--blacklist-cooldown-range", str(options.cooldown_range[0]), str(options.cooldown_range[1])]
    if options.ssh_port is not None:
        argv += ["--ssh-port", str(options.ssh_port)]
    if options.ssh_identity_file is not None:
        argv += ["--ssh-identity-file", options.ssh_identity_file]
    if options.network_interfaces:
        argv += ["--network-interfaces", ",".join(options.network_interfaces)]
    if options.start_timeout is not None:
        argv += ["--start-timeout", str(options.start_timeout)]
    if options.verbose:
        argv.append("--verbose")
    return argv + list(training_command)

