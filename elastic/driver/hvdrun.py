"""``horovodrun``: Horovod's launcher with the project's elastic driver; ``python -m
elastic.driver.hvdrun``: the same, as ``elastic-run`` starts it, fed by push discovery.

``main`` is the ``horovodrun`` command of the project's venv and image (``scripts/setup`` and
``images/Dockerfile`` make it so, ``elastic.driver.entry``; Horovod's own launcher stays
``horovodrun-horovod``): it installs the project's ``ElasticDriver``
(``elastic.driver.elastic_driver``) and runs Horovod's command line, everything else
(arguments, discovery, exit code) horovodrun's. A ``--host-discovery-script`` runs as Horovod
runs it, whatever the environment holds.

Both take the rendezvous server's fixed port, the one address it listens on and the address
its workers are told from the environment when set (``install_rendezvous_endpoint``:
``ELASTIC_RENDEZVOUS_PORT``, ``ELASTIC_RENDEZVOUS_BIND``, ``ELASTIC_RENDEZVOUS_ADDRESS``), where a
second launcher of the job answers the world this one starts; a bad one ends horovodrun with
one line before anything starts.

With ``ELASTIC_ADOPT_WORLD`` (the seconds the workers' lease wrappers wait to be adopted,
their ``--adopt-window``) the driver takes over the world running at that fixed endpoint
instead of starting one (``ElasticDriver.adopt``): what a launcher that took over the job from
a lost leader runs. It needs ``ELASTIC_RENDEZVOUS_PORT`` (the workers ask there).

``launcher_main`` (``python -m elastic.driver.hvdrun``, what ``elastic-run`` starts in its push
mode) adds two things. With ``DISCOVERY_URL`` in the environment, the Horovod driver's
``--host-discovery-script`` is replaced by an in-process ``elastic.driver.push.DaemonDiscovery``
on that daemon: no process per poll, and the driver hears of a change as soon as the daemon
serves it (Horovod's own loop runs the script once a second; stock Horovod through a Python
middleman); without it, it is ``main``. And it handles ``LAUNCHER_GONE_SIGNAL`` (below).
Push discovery is elastic-run's choice, not the environment's: a user's ``horovodrun
--host-discovery-script discover-hosts`` has ``DISCOVERY_URL`` set for ``discover-hosts``, and
keeps its script (its fallback, cache and age options included), as does ``elastic-run
--discovery-mode script``.

The hook: horovodrun's launcher builds its discovery as
``horovod.runner.elastic.discovery.HostDiscoveryScript(script, slots)``; ``launcher_main`` swaps
that name for a factory before handing over to ``horovod.runner.launch.run_commandline``.

When the launcher dies: ``elastic-run`` starts ``launcher_main`` with ``PR_SET_PDEATHSIG`` =
``LAUNCHER_GONE_SIGNAL`` (SIGUSR2), so the kernel tells it when ``elastic-run`` is gone,
``kill -9`` included. It then prints one line saying so (where someone still reads it: its
output goes to /dev/null from then on, elastic-run's relay is gone) and stops the job: SIGTERM to
itself (Horovod's own shutdown: each worker's local ssh client or process is ended through
its process group, patch 0102), at the same time the job's processes on the hosts it last discovered are
stopped (``elastic.common.reap``, through the ssh argv in ``ELASTIC_REAP_SSH``, as
``elastic-run`` does at a normal end: a command run over ssh without a terminal outlives its
ssh client), and once more when Horovod's shutdown is over (a worker whose ssh session was
being set up during the first reap can start after that reap's scan; with Horovod's ssh clients
gone no more can start), and at most 1.5 x ``GONE_EXIT_AFTER`` seconds later it exits (128+SIGTERM)
whatever Horovod still waits for. With ``ELASTIC_ADOPT_WINDOW`` (elastic-run's
``--adopt-window``: the workers wait that long for another launcher to adopt them) it exits at
once instead, touching nothing: Horovod's shutdown would end the workers' ssh sessions and,
seeing those exits, abort the world the next leader adopts. In ``--discovery-mode script`` (the ``horovodrun`` command,
``main``) the signal is SIGTERM: Horovod's shutdown only, no reap. Nothing started by the job
outlives the launcher by more than that.
"""
from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence

from elastic.common.reap import RUN_ID_ENV, reap_hosts
from elastic.driver import rendezvous_endpoint
from elastic.driver.elastic_driver import install as install_driver
from elastic.driver.push import DaemonDiscovery
from elastic.environment import (
    ELASTIC_ADOPT_WINDOW,
    ELASTIC_ADOPT_WORLD,
    ELASTIC_REAP_SSH,
    ELASTIC_RENDEZVOUS_ADDRESS,
    ELASTIC_RENDEZVOUS_BIND,
    ELASTIC_RENDEZVOUS_PORT,
)
from elastic.errors import BadEndpoint, PortTaken
from shared.environment import DISCOVERY_URL
from shared.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, exit_for_signal

DISCOVERY_URL_ENV = DISCOVERY_URL
REAP_SSH_ENV = ELASTIC_REAP_SSH
LAUNCHER_GONE_SIGNAL = signal.SIGUSR2
GONE_EXIT_AFTER = 20.0
ADOPT_PORT_WAIT = 1.5 * GONE_EXIT_AFTER + 5.0  # a lost launcher's horovodrun ends within 1.5 x GONE_EXIT_AFTER

_discoveries: list[DaemonDiscovery] = []
FIRST_ANSWER_TIMEOUT = 150.0  # seconds for the daemon's first answer: its ready timeout and room
_reaped = threading.Event()  # set once the reaps after the launcher's death are over
_launcher_gone = threading.Event()
_horovod_done = threading.Event()  # horovodrun's run_commandline has returned (or raised)


def install(url: str) -> None:
    """Make horovodrun's elastic driver discover hosts from the daemon at ``url``."""
    from horovod.runner.elastic import discovery

    def push_discovery(_script: str, slots: int) -> DaemonDiscovery:
        # elastic-run starts horovodrun while its daemon starts (spawn first): the first answer
        # may take the daemon's whole ready timeout (120 s), not just the usual 60 s
        found = DaemonDiscovery(url, default_slots=slots or 1, first_timeout=FIRST_ANSWER_TIMEOUT)
        found.start()
        _discoveries.append(found)
        return found

    discovery.HostDiscoveryScript = push_discovery


def reap_ssh_argv(value: str | None) -> list[str] | None:
    """``ELASTIC_REAP_SSH`` (a JSON list of candidate argv lists: the first whose program
    exists wins; elastic-run writes it) -> the ssh argv, or None."""
    try:
        candidates = json.loads(value or "[]")
    except ValueError:
        return None
    for argv in candidates if isinstance(candidates, list) else []:
        if (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
                and (os.sep not in argv[0] or os.path.exists(argv[0]))):
            return argv
    return None


def _stop_job() -> None:
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # Horovod's shutdown (or, before its driver runs, the end)
        hosts = sorted({h for d in _discoveries for h in d.last_hosts()})
        ssh = reap_ssh_argv(os.environ.get(REAP_SSH_ENV))
        run_id = os.environ.get(RUN_ID_ENV)
        if hosts and ssh and run_id:
            failed = set(reap_hosts(hosts, ssh, run_id, timeout=GONE_EXIT_AFTER / 2))
            # a worker whose ssh session was being set up may have started after that reap's
            # scan: once Horovod's shutdown ended its ssh clients (no more can start), again
            _horovod_done.wait(GONE_EXIT_AFTER / 2)
            hosts = sorted({*hosts, *(h for d in _discoveries for h in d.last_hosts())})
            failed.update(reap_hosts(hosts, ssh, run_id, timeout=GONE_EXIT_AFTER / 2))
            if failed:
                print(f"horovodrun: could not check for leftover training processes on {', '.join(sorted(failed))}",
                      file=sys.stderr, flush=True)
    finally:
        _reaped.set()


def _quiet() -> None:
    """Point stdout and stderr at /dev/null: elastic-run relays them through pipes
    (``elastic.launch.console``), which nobody reads once it is gone, and a write to them
    would fail (EPIPE) in whichever thread makes it, the reap's included."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


def _leave_to_adoption() -> None:
    """The launcher is gone and its workers wait to be adopted (``ELASTIC_ADOPT_WINDOW``): end
    this process at once, as its loss would. Horovod's shutdown would end each worker's ssh
    session and, seeing those exits, abort the world the next leader adopts."""
    try:
        print("horovodrun: elastic-run (the launcher) is gone: leaving its workers to the launcher that "
              "adopts them", file=sys.stderr, flush=True)
    except OSError:
        pass
    os._exit(exit_for_signal(signal.SIGTERM))


def _exit_when_stuck() -> None:
    if os.environ.get(ELASTIC_ADOPT_WINDOW, "0") not in ("", "0"):
        _leave_to_adoption()
    try:  # the launcher's terminal, when horovodrun was started without the relay
        print("horovodrun: elastic-run (the launcher) is gone: stopping the job", file=sys.stderr, flush=True)
    except OSError:
        pass
    _quiet()
    threading.Thread(target=_stop_job, name="launcher-gone", daemon=True).start()
    _reaped.wait(GONE_EXIT_AFTER)
    # Horovod had its chance; exit hard (its middlemen see us go and end their commands)
    threading.Event().wait(GONE_EXIT_AFTER / 2)
    sys.stderr.flush()
    os._exit(exit_for_signal(signal.SIGTERM))


def _on_launcher_gone(_signum, _frame) -> None:
    if _launcher_gone.is_set():
        return
    _launcher_gone.set()  # no I/O here: the main thread may be inside a write
    threading.Thread(target=_exit_when_stuck, name="launcher-gone-exit", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """The ``horovodrun`` command: Horovod's launcher with the project's driver; ``argv``
    (default ``sys.argv[1:]``) is horovodrun's, and so is everything else."""
    return _run(argv, launcher=False)


def launcher_main(argv: Sequence[str] | None = None) -> int:
    """``python -m elastic.driver.hvdrun``: ``main`` as ``elastic-run`` starts it, with push
    discovery from ``DISCOVERY_URL`` (when set) and the launcher's loss handled."""
    return _run(argv, launcher=True)


def install_rendezvous_endpoint(env: Mapping[str, str], wait: float = 0.0) -> None:
    """The rendezvous server's fixed port, the address it listens on and the address its
    workers are told, from ``ELASTIC_RENDEZVOUS_PORT``/``_BIND``/``_ADDRESS``
    (``elastic.driver.rendezvous_endpoint``), each when set: where another launcher of the job
    answers the world this one starts; a port in use is tried again for up to ``wait`` seconds.
    ``BadEndpoint`` names a bad one (a bind address without the port too)."""
    raw_port, raw_address = env.get(ELASTIC_RENDEZVOUS_PORT), env.get(ELASTIC_RENDEZVOUS_ADDRESS)
    raw_bind = env.get(ELASTIC_RENDEZVOUS_BIND)
    port = rendezvous_endpoint.parse_port(raw_port, ELASTIC_RENDEZVOUS_PORT) if raw_port else None
    address = rendezvous_endpoint.parse_address(raw_address, ELASTIC_RENDEZVOUS_ADDRESS) if raw_address else None
    bind = rendezvous_endpoint.parse_bind(raw_bind, ELASTIC_RENDEZVOUS_BIND) if raw_bind else None
    if bind is not None and port is None:
        raise BadEndpoint(f"{ELASTIC_RENDEZVOUS_BIND} needs {ELASTIC_RENDEZVOUS_PORT}: it names where the fixed "
                          "port is listened on")
    rendezvous_endpoint.install(port, address, wait, bind)


def adopt_window(env: Mapping[str, str]) -> float | None:
    """``ELASTIC_ADOPT_WORLD``: the workers' adoption window in seconds (elastic-run checked it
    against the lease wrapper's range), None when unset or 0; ``BadEndpoint`` when not a number
    of seconds or without ``ELASTIC_RENDEZVOUS_PORT``
    (workers ask to be adopted only at the job's fixed rendezvous endpoint)."""
    raw = env.get(ELASTIC_ADOPT_WORLD)
    if not raw:
        return None
    try:
        window = float(raw)
    except ValueError:
        window = math.nan
    if not (math.isfinite(window) and window >= 0):
        raise BadEndpoint(f"{ELASTIC_ADOPT_WORLD} must be a number of seconds, got {raw!r}")
    if window == 0:
        return None
    if not env.get(ELASTIC_RENDEZVOUS_PORT):
        raise BadEndpoint(f"{ELASTIC_ADOPT_WORLD} needs {ELASTIC_RENDEZVOUS_PORT}: the workers ask to be "
                          "adopted at the job's fixed rendezvous endpoint")
    return window


def _run(argv: Sequence[str] | None, *, launcher: bool) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        window = adopt_window(os.environ)
        # adopting: the lost leader's process may still hold the port while it ends
        install_rendezvous_endpoint(os.environ, ADOPT_PORT_WAIT if window else 0.0)
    except BadEndpoint as exc:
        print(f"horovodrun: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if launcher:
        signal.signal(LAUNCHER_GONE_SIGNAL, _on_launcher_gone)
    install_driver(os.environ.get(RUN_ID_ENV), adopt_window=window)
    url = os.environ.get(DISCOVERY_URL_ENV) if launcher else None
    if url:
        install(url)
    from horovod.runner.launch import run_commandline
    sys.argv = ["horovodrun", *argv]
    try:
        run_commandline()
    except PortTaken as exc:
        print(f"horovodrun: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILURE
    finally:
        _horovod_done.set()
        if _launcher_gone.is_set():  # Horovod ended first: let the reaps finish (they have deadlines)
            _reaped.wait(1.5 * GONE_EXIT_AFTER)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(launcher_main())
