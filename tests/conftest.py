"""Shared fixtures and the suite's markers.

``cluster``: a fresh local cluster (0 workers) per test, stopped afterwards.
``daemon(cluster, *flags, ...)``: starts a real ``discovery-daemon`` for the cluster's pods
(``tests.daemons.start_daemon``); each is stopped when the test ends, also on failure.

Markers (registered in pyproject.toml), applied here by directory and by fixture, and per
test where a module mixes kinds:

- ``horovod``: runs real Horovod (horovodrun, elastic-run or ``hvd.init``): every test under
  ``tests/runtime`` and ``tests/horovod_upstream``, every test on the pods of
  ``HOROVOD_FIXTURES``, and the tests marked so elsewhere;
- ``images``: builds or runs the container images (``tests/images``);
- ``e2e``: the whole demo path (``tests/e2e``);
- ``slow``: all of the above, and every test that starts a local cluster, a discovery daemon
  or throwaway sshd servers (the fixtures in ``SLOW_FIXTURES``), or is marked ``slow``.

``pytest -m "not slow"`` is the fast subset: the pure units and the one-process checks
(``scripts/test --quick``).

Nothing left behind: a module whose tests leave a process of this session, a port of this
process or a mount under the session's temporary directory fails at its last test
(``nothing_left_behind``, tests/leftovers.py). git runs as on a fresh machine, with no global
or system configuration (``pytest_configure``).

Parallel runs (pytest-xdist, ``-n N --dist loadscope``; ``scripts/test`` runs so): every test
is in the group of its module (``group_of``, ``pytest_xdist_make_scheduler``), so a module's
tests run in one worker one after the other and its module-scoped cluster starts once, and
every test under ``tests/images`` in one group, so the images are built by one worker only
(the build is session-scoped). The
groups start longest first, by the seconds tests/durations.json holds for them
(``python -m tests.durations REPORT.xml`` writes it from ``--junitxml`` reports). Each
worker is its own session: its own ``SESSION_TAG`` (tests/processes.py), temp directories and
safety net.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemons import Daemon, start_daemon
from tests.processes import SESSION_ENV, SESSION_TAG, kill_with
from training.environment import HOROVOD_CYCLE_TIME, OMP_NUM_THREADS

TESTS = Path(__file__).resolve().parent
BY_DIRECTORY = {"runtime": ("horovod",), "horovod_upstream": ("horovod",), "images": ("images",), "e2e": ("e2e",)}
HOROVOD_FIXTURES = frozenset({"two_pods", "pods"})  # the pods elastic-run and horovodrun jobs run on
SLOW_MARKERS = ("horovod", "images", "e2e")
SLOW_FIXTURES = frozenset({"cluster", "daemon", "sync_cluster", "pod_ips", "ssh_dir", "sshd_factory",
                           "two_pods"})


def pytest_configure(config: pytest.Config) -> None:
    """Every test and everything it starts sees git as on a fresh machine: no global or
    system configuration (no identity, no ``safe.directory``), whatever this machine has.

    And one compute thread per process (``OMP_NUM_THREADS=1``, which horovodrun hands to every
    worker, as ``scripts/demo`` does): the local cluster's pods share this machine's cores with
    each other and with the other tests, so a rank that sizes its thread pool from the
    machine's cores, as a pod on a node of its own should (``training.cpus``), oversubscribes
    them: a scale-up job of 2 -> 3 ranks took 38 CPU-seconds so, 21 with one thread. One test
    runs the trainer without it (tests/training/test_commands.py's ResNet-50).

    And a 5 ms Horovod negotiation cycle (``HOROVOD_CYCLE_TIME``; Horovod's default is 1 ms),
    which horovodrun hands on too: every rank's background thread wakes once a cycle and
    negotiates each collective with the others, and with eight ranks sharing two cores the
    1 ms cycle is about half of what the ranks burn (a 1-float allreduce every 50 ms in 8
    ranks: 0.14 cores per rank at 1 ms, 0.064 at 5 ms, at 3% fewer steps). Horovod's own
    default is what a rank with a core of its own wants, and what a GPU node gets."""
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    os.environ[OMP_NUM_THREADS] = "1"
    os.environ[HOROVOD_CYCLE_TIME] = "5"


def group_of(nodeid: str) -> str:
    """The group a test runs in, in a parallel run: ``images`` for every test under
    tests/images (the images are built once, by one worker), else its module's path under
    tests/ (a module's tests in one worker, one after the other: its module-scoped cluster
    starts once). The keys of tests/durations.json."""
    path = nodeid.split("::", 1)[0]
    path = path[len("tests/"):] if path.startswith("tests/") else path
    return "images" if path.startswith("images/") else path


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduling with this suite's groups (``group_of``), handed out in
    collection order, which a worker's collection sets longest first
    (``_longest_modules_first``). (xdist's own ``loadgroup`` reads ``xdist_group`` markers
    through a node attribute pytest 9 no longer has: its groups silently fell apart.)"""
    if config.getvalue("dist") not in ("loadscope", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            relative = Path(str(item.path)).resolve().relative_to(TESTS)
        except ValueError:
            continue
        top = relative.parts[0]
        for name in BY_DIRECTORY.get(top, ()):
            item.add_marker(name)
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & HOROVOD_FIXTURES:
            item.add_marker("horovod")
        if any(item.get_closest_marker(m) for m in SLOW_MARKERS) or fixtures & SLOW_FIXTURES:
            item.add_marker("slow")
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler takes this order
        _longest_modules_first(items)


def _longest_modules_first(items: list[pytest.Item]) -> None:
    """Order the groups of a parallel run by their measured seconds (tests/durations.json),
    longest first, each group's tests in their own order: xdist hands groups out in this
    order as workers come free, so a long module starts early instead of ending the run
    alone (longest-processing-time-first scheduling). A group not measured goes last."""
    import json

    try:
        seconds = json.loads((TESTS / "durations.json").read_text())["modules"]
    except (OSError, ValueError, KeyError):
        seconds = {}
    order = {name: n for n, name in enumerate(dict.fromkeys(group_of(i.nodeid) for i in items))}
    items.sort(key=lambda i: (-float(seconds.get(group_of(i.nodeid), 0.0)), order[group_of(i.nodeid)]))


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """The session's safety net (tests/processes.py): every process still carrying this
    session's tag when the suite ends is killed, and named on stderr so the test that
    forgot it can be found."""
    yield
    killed = kill_with(SESSION_ENV, SESSION_TAG)
    if killed:
        import sys
        print(f"\ntests: killed {len(killed)} process(es) left behind: {killed}", file=sys.stderr)


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind(tmp_path_factory) -> Iterator[None]:
    """A module whose tests, once all its fixtures are torn down, leave a process of this
    session, a port of this process or a mount under the session's temporary directory
    behind fails at its last test (tests/leftovers.py), naming each; then they are cleared
    (processes killed, mounts detached), so the next module starts clean."""
    import subprocess

    from tests import leftovers

    temp_root = tmp_path_factory.getbasetemp()
    before = leftovers.snapshot(temp_root)
    yield
    left = leftovers.left_behind(before, temp_root)
    if left:
        kill_with(SESSION_ENV, SESSION_TAG)
        for mount in sorted(leftovers.mounts_under(temp_root) - before.mounts, reverse=True):
            subprocess.run(["umount", "-l", "--", mount], capture_output=True, check=False)
        pytest.fail(f"left behind by this module's tests: {'; '.join(left)}", pytrace=False)


@pytest.fixture
def cluster(tmp_path):
    from localcluster.testing import running_cluster

    with running_cluster(tmp_path / "cluster") as handle:
        yield handle


@pytest.fixture
def daemon() -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start(*args, **kwargs) -> Daemon:
        d = start_daemon(*args, **kwargs)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
