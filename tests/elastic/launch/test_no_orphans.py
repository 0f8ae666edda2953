"""Nothing outlives elastic-run: killed with SIGKILL or SIGTERM at each stage of a job -- its
discovery daemon starting, horovodrun waiting for hosts, the daemon's prepare hook syncing
the dataset to a pod, the training running on two pods, the clean-up after the training --
or ended by a failed training, elastic-run leaves no process behind on this machine or on
the pods (local-cluster pods are local processes): not its daemon, the prepare hook and what
it runs, horovodrun, Horovod's middlemen and ssh clients, nor the training processes.

Every process of one run is found by a tag in its environment (``NO_ORPHAN_TAG=<uuid>``, set
for elastic-run and inherited by everything it starts; horovodrun exports it to the workers
on the pods), and the test waits, with a deadline, for none to be left."""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.elastic.launch.conftest import env, launcher_args
from tests.waiting import wait_for

TAG = "NO_ORPHAN_TAG"
STAGE_TIMEOUT = 180.0  # reaching a stage: daemon, ssh-bootstrap, horovodrun start on a busy machine
GONE_TIMEOUT = 90.0  # everything gone after the kill (hvdrun exits at most ~30 s after the launcher)


def tagged(tag: str) -> dict[int, list[str]]:
    """{pid: argv} of every live process whose environment carries ``NO_ORPHAN_TAG=tag``."""
    needle = f"{TAG}={tag}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if raw:  # a zombie has no command line left
            found[int(entry.name)] = raw.decode(errors="replace").rstrip("\0").split("\0")
    return found


def program(name: str) -> Callable[[list[str]], bool]:
    """argv runs ``name`` (a console script under python, or the executable itself)."""
    return lambda argv: any(Path(a).name == name for a in argv[:2])


def module(name: str) -> Callable[[list[str]], bool]:
    """argv is ``python -m name ...``."""
    return lambda argv: argv[1:3] == ["-m", name]


def reaping(found: dict[int, list[str]]) -> bool:
    """The launcher's clean-up is stopping the run's leftover processes on the pods: the reap's
    ssh clients (``elastic.common.reap``; tagged, as everything the run starts) are running.
    Only this run's: another run's reap on the machine says nothing about this one's stage."""
    return any(Path(argv[0]).name != "ssh" and any("ELASTIC_RUN_ID=" in a and "kill -TERM" in a for a in argv)
               for argv in found.values())


def any_process(shows: Callable[[list[str]], bool]) -> Callable[[dict[int, list[str]]], bool]:
    return lambda found: any(shows(argv) for argv in found.values())


# stage -> (extra elastic-run flags, training command, a test on the run's processes that
# shows the stage is on)
TRAIN = "exec sleep 3001"
# the training leaves a process that ignores SIGTERM and exits 0: the job ends at once, and
# elastic-run's clean-up (the reap: SIGTERM, 5 s, SIGKILL) takes seconds
LEAVE_ONE = "(trap '' TERM; exec sleep 3002) </dev/null >/dev/null 2>&1 & exit 0"
STAGES = {
    "daemon starting": ((), TRAIN, any_process(program("discovery-daemon"))),
    "waiting for hosts": (("--selector", "app=elastic-horovod,role=nobody"), TRAIN,
                          any_process(module("elastic.driver.hvdrun"))),
    "syncing": (("--dataset", "DATASET:/data/no-orphans"), TRAIN, any_process(program("dataset-sync"))),
    "training": ((), TRAIN, lambda found: sum(argv == ["sleep", "3001"] for argv in found.values()) == 2),
    "shutting down": ((), LEAVE_ONE, reaping),
}


def start(cluster, tmp_path: Path, tag: str, extra: tuple[str, ...], training: str) -> subprocess.Popen:
    dataset = tmp_path / "dataset"
    (dataset / "sub").mkdir(parents=True)
    for i in range(50):
        (dataset / "sub" / f"f{i}").write_bytes(bytes(i) * 20000)
    args = launcher_args(cluster, tmp_path, "--stall-timeout", "0")
    args += [a.replace("DATASET", str(dataset)) for a in extra]  # a second --selector wins
    e = env()
    e[TAG] = tag
    log = open(tmp_path / "elastic-run.log", "wb")
    try:
        return subprocess.Popen(args + ["--", "sh", "-c", training], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, env=e)
    finally:
        log.close()


def check_none_left(proc: subprocess.Popen, tag: str, tmp_path: Path, exit_timeout: float = GONE_TIMEOUT) -> None:
    def log() -> str:
        return (tmp_path / "elastic-run.log").read_text(errors="replace")[-4000:]

    wait_for(lambda: proc.poll() is not None, exit_timeout, "elastic-run to exit", interval=0.2, detail=log)
    wait_for(lambda: not tagged(tag), GONE_TIMEOUT, "every process of the run to end", interval=0.5,
             detail=lambda: f"left: {tagged(tag)}\n{log()}")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_killed_at_each_stage_it_leaves_no_process(two_pods, tmp_path, stage, sig):
    extra, training, shows = STAGES[stage]
    tag = uuid.uuid4().hex
    proc = start(two_pods, tmp_path, tag, extra, training)
    try:
        def alive() -> None:
            assert proc.poll() is None, (tmp_path / "elastic-run.log").read_text(errors="replace")[-4000:]

        wait_for(lambda: shows(tagged(tag)), STAGE_TIMEOUT, f"the stage '{stage}'", interval=0.02, alive=alive)
        proc.send_signal(sig)
        check_none_left(proc, tag, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in tagged(tag):  # leave nothing for the next test, whatever happened
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.timeout(400)
def test_a_failed_training_leaves_no_process(two_pods, tmp_path):
    """The issue's case: horovodrun failed, elastic-run exited; nothing of it may be left."""
    tag = uuid.uuid4().hex
    proc = start(two_pods, tmp_path, tag, (), "exit 3")
    try:
        check_none_left(proc, tag, tmp_path, exit_timeout=300)
        assert proc.returncode == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
