"""SIGTERM to elastic-run ends it, its discovery daemon and its driver within its grace, also
after a failure the driver handled. Once, a stop after a pod's ranks hung and came back left
horovodrun, elastic-run and the daemon running for minutes (the driver's threads waiting on
each other); the driver now ends within a bound after its stop, and this checks the whole
launcher as a user stops it (a drain, `kubectl delete pod`).

Local cluster, 2 pods, elastic-run with its own daemon, the failure detector's job
(tests/runtime/detector_job.py): the two ranks of worker-1 hang (a GPU hang: SIGSTOP of the
training processes only, the pod stays Ready), the driver loses them and the ranks left train
on; the hung ranks are thawed (the hang ends, as in the report), then SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster import control
from localcluster.testing import running_cluster
from shared.event_kinds import Kind
from tests.runtime.liveness import paused, pid_gone
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.horovod]

BIN = Path(sys.executable).parent
JOB = Path(__file__).resolve().parents[1] / "runtime" / "detector_job.py"
JOINS_JOB = JOB.parent / "joins_job.py"
TERM_GRACE = 20.0
# elastic-run's own bound after the training's grace: horovodrun's stop, the reap over ssh and
# the daemon's end; generous on a loaded machine, far below the minutes the report saw
STOP_BOUND = TERM_GRACE + 40.0


def _lines(path: Path) -> list[dict]:
    out: list[dict] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def _tree(root: int) -> set[int]:
    """root and every live process under it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return {pid for pid in tree if pid in parents}


def _live(pids: set[int]) -> set[int]:
    """Those of pids that still run (not gone, not a zombie)."""
    return {pid for pid in pids if not pid_gone(pid)}


def _job_processes(job: Path, log_setting: str) -> set[int]:
    """This run's processes anywhere on the machine (the pods' too): the job script in their
    argv and log_setting (``NAME=path``: this test's log) in their environment."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(job).encode() in argv and log_setting.encode() in environ:
            found.add(int(entry.name))
    return _live(found)


def _trainers(job: Path, log_setting: str, host: str) -> set[int]:
    """The training processes (``python JOB``, not a wrapper around it) of this run on host,
    as this machine numbers them (the pods have pid namespaces of their own)."""
    found = set()
    for pid in _job_processes(job, log_setting):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:2] == [str(job).encode()] and f"HOROVOD_HOSTNAME={host}".encode() in environ:
            found.add(pid)
    return found


def _freeze_marks(log: Path) -> int:
    """How many of the job's processes said they hang now (detector_job.py's marks)."""
    return len(list(log.parent.glob(f"{log.name}.frozen.*")))


class Run:
    """One elastic-run of the detector's job on cluster c, in its own process group; ``stop()``
    sends SIGTERM and checks that everything it ran ends."""

    def __init__(self, c, tmp_path: Path, min_np: int, max_np: int, job: Path = JOB, log_var: str = "DET_LOG",
                 **job_env: str):
        self.log, self.events, self.out = tmp_path / "job.jsonl", tmp_path / "events.jsonl", tmp_path / "run.log"
        self.job, self.log_setting = job, f"{log_var}={self.log}"
        env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1",
                   DET_STEP_SECONDS="0.1", **job_env)
        env[log_var] = str(self.log)
        for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET", "ELASTIC_JOB_ID"):
            env.pop(name, None)
        argv = [str(BIN / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
                "--kubeconfig", str(c.kubeconfig), "--ssh-port", str(c.ssh_port),
                "--ssh-identity-file", str(c.identity), "--network-interface", "lo",
                "--min-np", str(min_np), "--max-np", str(max_np), "--elastic-timeout", "120",
                "--term-grace", f"{TERM_GRACE:g}", "--events-file", str(self.events),
                "--", sys.executable, str(job)]
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                         start_new_session=True)
        self.code: int | None = None

    def output(self) -> str:
        return self.out.read_text(errors="replace")[-4000:]

    def alive(self) -> None:
        assert self.proc.poll() is None, f"elastic-run exited {self.proc.returncode}:\n{self.output()}"

    def kinds(self, kind: str) -> list[dict]:
        return [e for e in _lines(self.events) if e.get("kind") == kind]

    def stop(self) -> None:
        """SIGTERM: elastic-run exits 143 within its grace and a bound, and its daemon,
        horovodrun (the driver) and every process of the job on the pods are gone."""
        launcher = _tree(self.proc.pid)
        assert len(launcher) > 2, "elastic-run runs no daemon or horovodrun"
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.code = self.proc.wait(timeout=STOP_BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"elastic-run still runs {STOP_BOUND:g} s after SIGTERM:\n{self.output()}", pytrace=False)
        took = time.monotonic() - sent
        def left() -> set[int]:
            return _live(launcher - {self.proc.pid}) | _job_processes(self.job, self.log_setting)

        wait_for(lambda: not left(), 15, "the daemon, horovodrun and the job's processes to be gone with elastic-run",
                 detail=lambda: f"still running: {sorted(left())}")
        assert self.code == 143, f"elastic-run exited {self.code} {took:.1f} s after SIGTERM:\n{self.output()}"

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("first_slots, left", [(2, 2), (1, 1)], ids=["half-silent", "silent-majority"])
def test_sigterm_after_a_pods_ranks_hung_ends_elastic_run_its_daemon_and_driver(tmp_path, first_slots, left):
    """worker-0 has first_slots slots, worker-1 two; worker-1's two ranks hang. half-silent:
    2 of 4; silent-majority: 2 of 3 (the fork's driver suspected itself for ever there and
    training stopped for good), and the one rank left trains alone."""
    with running_cluster(tmp_path / "cluster", workers=1, slots=first_slots) as c:
        created, _ = control.scale(c.state, 2, slots=2)
        control.wait_ready(c.state, created, 120)
        hung_host = c.pod_ip("worker-1")
        run = Run(c, tmp_path, left, first_slots + 2, DET_FREEZE_HOST=hung_host, DET_FREEZE_AT_STEP="30")
        frozen: list[int] = []
        try:
            wait_for(lambda: _freeze_marks(run.log) == 2, 420, f"the two ranks on {hung_host} to hang",
                     alive=run.alive, detail=run.output)
            frozen = sorted(_trainers(JOB, run.log_setting, hung_host))  # this machine's pids, not the pod's
            assert len(frozen) == 2, f"not two training processes on {hung_host}: {frozen}"
            hung = time.time()
            wait_for(lambda: len(run.kinds(Kind.WORKER_LOST)) == 2, 120, "the driver to lose the two hung ranks",
                     alive=run.alive, detail=run.output)
            wait_for(lambda: any(r["size"] == left and r["time"] > hung for r in _lines(run.log)), 180,
                     f"the {left} rank(s) left to train on", alive=run.alive, detail=run.output)
            for pid in _trainers(JOB, run.log_setting, hung_host) & set(frozen):  # the hang ends
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            run.stop()
        finally:
            run.close()
            for pid in _trainers(JOB, run.log_setting, hung_host) & set(frozen):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    lost = sorted(e["detail"]["host"] for e in run.kinds(Kind.WORKER_LOST))
    assert lost == [hung_host, hung_host], lost
    # no doubt over the silent (the fork's driver re-baselined every timeout instead); a lag
    # re-baseline of a driver that woke late on a loaded machine names no silent worker
    doubts = [e["detail"] for e in run.kinds(Kind.LIVENESS_REBASELINE) if e["detail"].get("silent")]
    assert not doubts, doubts


@pytest.mark.timeout(600)
def test_a_driver_stalled_six_seconds_loses_none_of_eight_ranks_and_sigterm_ends_all(tmp_path):
    """Two 4-slot pods, a world of 8, each rank behind elastic-run's lease wrapper (its run id,
    one kept connection): horovodrun (the driver, its rendezvous server and the leases'
    answers) is stopped for 6 s (a launcher throttled or paused). No lease runs out and nobody
    is lost: the eight train on at world size 8; then SIGTERM ends everything. The simulation
    shows the old rule (a new connection per renewal into a listen backlog of 5) failing from
    16 workers up."""
    with running_cluster(tmp_path / "cluster", workers=2, slots=4) as c:
        run = Run(c, tmp_path, 8, 8)
        try:
            def eight_since(t: float) -> bool:
                return len({r["rank"] for r in _lines(run.log) if r["size"] == 8 and r["time"] > t}) == 8

            wait_for(lambda: eight_since(0), 480, "the world of eight to train", alive=run.alive, detail=run.output)
            driver = [p for p in _tree(run.proc.pid) if b"elastic.driver.hvdrun" in _argv(p)]
            assert len(driver) == 1, f"no single horovodrun (elastic.driver.hvdrun) under elastic-run: {driver}"
            thawed = paused(driver[0], 6.0)  # the driver stopped for 6 s
            wait_for(lambda: eight_since(thawed + 10) or run.kinds(Kind.WORKER_LOST), 240,  # a loss fails below
                     "the eight to train at world size 8 10 s after the thaw", alive=run.alive, detail=run.output)
            failed = [e for e in run.kinds(Kind.WORKER_EXIT) if e["detail"].get("exit_code")]
            gone = run.kinds(Kind.WORKER_LOST) + failed
            assert not gone, f"the driver's stall cost workers: {gone}"
            said = [line for line in run.output().splitlines() if "elastic-run lease:" in line]
            assert not said, f"a lease ran out: {said}"
            run.stop()
        finally:
            run.close()


@pytest.mark.timeout(600)
def test_a_rank_waiting_for_its_30_s_background_write_is_kept_when_a_peer_dies(tmp_path):
    """Three 1-slot pods; rank 0's pod (worker-0) writes for 30 s in the trainer's background
    writer while its main thread waits for it, idle (a trainer's restore waits for its write in
    flight), and meanwhile the rank on worker-1 is killed. The barrier deadline (15 s, the
    default) finds worker-0 busy through its declared work, twice, and keeps it; worker-0 and
    worker-2 train at world size 2; then SIGTERM ends everything. Before, such a rank was lost
    at the first deadline and its host refused."""
    with running_cluster(tmp_path / "cluster", workers=3, slots=1) as c:
        busy, victim_host, third = (c.pod_ip(f"worker-{i}") for i in range(3))
        run = Run(c, tmp_path, 1, 3, job=JOINS_JOB, log_var="JOINS_LOG", JOINS_STOP=str(tmp_path / "stop"),
                  JOINS_BUSY_HOST=busy, JOINS_BUSY_AT_STEP="20", JOINS_BUSY_SECONDS="30", JOINS_BUSY_IN="background")
        try:
            def trained_at_two(host: str) -> bool:
                return any(r.get("ev") == "step" and r["host"] == host and r["size"] == 2 for r in _lines(run.log))

            wait_for(lambda: Path(f"{run.log}.busy").exists(), 420, "rank 0 to start its background write",
                     alive=run.alive, detail=run.output)
            victims = _trainers(JOINS_JOB, run.log_setting, victim_host)  # this machine's pids, not the pod's
            assert len(victims) == 1, f"not one training process on {victim_host}: {victims}"
            os.kill(victims.pop(), signal.SIGKILL)
            wait_for(lambda: any(e["detail"]["host"] == busy for e in run.kinds(Kind.WORKER_LOST))
                     or (trained_at_two(busy) and trained_at_two(third)), 240,
                     "rank 0 and the third worker to train at world size 2, or rank 0 to be lost",
                     alive=run.alive, detail=run.output)
            lost = [e["detail"] for e in run.kinds(Kind.WORKER_LOST)]
            assert not any(d["host"] == busy for d in lost), f"the busy rank 0 was lost: {lost}"
            kept = run.kinds(Kind.BARRIER_BUSY)
            assert kept and all(e["detail"]["host"] == busy for e in kept), kept
            run.stop()
        finally:
            run.close()


@pytest.mark.timeout(600)
def test_a_failed_joiners_pod_is_tried_again_after_a_cooldown_and_its_sibling_joins(tmp_path):
    """A 2-slot pod (worker-1) is added to a world of one; its slot 1's joiner fails at start
    (exit 1 before hvd.init, every time). Its sibling on slot 0 joins (world size 2); the pod
    is refused for a cooldown (3 s here, doubling), then slot 1 gets a joiner again (the fork
    refused the pod until it left discovery: slot 1 was tried once, and a multi-slot pod's
    ready siblings could wait for ever). Then SIGTERM ends everything."""
    with running_cluster(tmp_path / "cluster", workers=1, slots=1) as c:
        run = Run(c, tmp_path, 1, 3, job=JOINS_JOB, log_var="JOINS_LOG", JOINS_STOP=str(tmp_path / "stop"),
                  JOINS_BEFORE_INIT="*:1=exit:1", HOROVOD_ELASTIC_QUARANTINE_SECONDS="3")
        try:
            def steps(**match: object) -> list[dict]:
                return [r for r in _lines(run.log)
                        if r.get("ev") == "step" and all(r.get(k) == v for k, v in match.items())]

            wait_for(lambda: len(steps(size=1)) >= 20, 420, "the world of one to train", alive=run.alive,
                     detail=run.output)
            created, _ = control.scale(c.state, 2, slots=2)
            pod = control.wait_ready(c.state, created, 120)[created[0]]

            def starts_on_slot_1() -> list[dict]:
                return [e for e in run.kinds(Kind.WORKER_START)
                        if e["detail"]["host"] == pod and e["detail"]["slot"] == 1]

            wait_for(lambda: steps(size=2, host=pod, slot=0), 300, "slot 0 of the new pod to join",
                     alive=run.alive, detail=run.output)
            wait_for(lambda: len(starts_on_slot_1()) >= 2, 120, "slot 1 to get a joiner again after its cooldown",
                     alive=run.alive, detail=run.output)
            run.stop()
        finally:
            run.close()
    dropped = [e for e in run.kinds(Kind.JOINER_DROPPED) if e["detail"]["slot"] == 1]
    ended = [e for e in run.kinds(Kind.REFUSAL_ENDED) if e["detail"]["host"] == pod]
    assert dropped and ended, (dropped, ended)
    assert ended[0]["detail"]["after"] >= 3.0
    again = starts_on_slot_1()[1]
    assert again["time"] >= dropped[0]["time"] + 3.0, (dropped[0], again)
    assert not run.kinds(Kind.WORKER_LOST)


def _argv(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
