"""A leader whose node vanished (every one of its processes SIGSTOPped: its connections stay
open and silent, its rendezvous server holds its port) while its world trains, on a local
cluster laid out as deploy/ lays out a job: each launcher's rendezvous server listens on its
own address (``--rendezvous-bind``, a pod's IP), the workers are told the Service's
(``--rendezvous-address``), and a ``localcluster.serviceproxy`` there forwards each new
connection to the launcher its readiness probe finds Ready, the probe read from
deploy/job/launcher.yaml (``/elastic-run-lease/-``, which only a leader's horovodrun answers).

With ``--adopt-window``, the standby leads within the Lease's duration (3 s) plus 5 s of the
stop and adopts the running world: the same training processes train on, none is started by
the new leader. Then SIGCONT in the worst order of a thaw, held: every process of the old
leader but elastic-run (whose watchdog fences it) first, its horovodrun left to run until its
driver has handled an ssh client's exit (a session sshd ended during the freeze: the client
exits 255 at once) and withheld the abort of the world's collectives that exit asks for
(``elastic.driver.leading``; before it, the abort left within 24 ms of the wake and the
adopted training processes died), then elastic-run: the old leader exits ``EXIT_FENCED``
with its one line, and touched nothing after it woke (its driver recorded no world event, the
new leader's world had no reset, the workers are the same processes), and the job ends with 0
under the new leader.

The figures printed (and recorded in docs/architecture.md): stop to the standby leading, stop
to the world adopted, the longest gap between two training steps across the freeze and the
median one."""
from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from localcluster.addresses import claim_block
from localcluster.serviceproxy import probe_from_manifest
from localcluster.testing import running_cluster
from shared.driver_events import read_records as read_events
from shared.exitcodes import EXIT_FENCED
from shared.metrics_record import read_records
from tests.e2e.test_launcher_failover import (
    WORLD_KINDS,
    Launcher,
    longest_gap,
    signal_all,
    tagged,
    trains,
)
from tests.e2e.test_launcher_loss import GONE_TIMEOUT, START_TIMEOUT, TAG, launcher_tree, processes
from tests.waiting import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
LEASE = 3.0  # --leader-lease-duration of test_launcher_failover's ELECTION
# The standby takes the Lease over once it has seen it unchanged for LEASE by its own clock
# (read every 0.5 s), so it leads at most LEASE + 0.5 s after the leader's last renewal, which
# came before the stop. 5 s more covers the log line's way to the test and a loaded 2-core
# machine (other test runs, stress-ng beside it), and stays far below the worker lease and
# the adoption window the contract protects.
LEAD_BOUND = LEASE + 5.0


class Service:
    """``python -m localcluster.serviceproxy`` on ``listen``, over the launchers' ``backends``,
    probing them as deploy/'s kubelet would (the launcher container's readinessProbe)."""

    def __init__(self, work: Path, listen: tuple[str, int], backends: list[tuple[str, int]]):
        probe = probe_from_manifest(ROOT / "deploy" / "job" / "launcher.yaml", "launcher")
        self.probe = probe
        self.log_path = work / "service.log"
        args = [sys.executable, "-m", "localcluster.serviceproxy", "--listen", f"{listen[0]}:{listen[1]}",
                "--probe-path", probe.path, "--period", f"{probe.period:g}", "--timeout", f"{probe.timeout:g}",
                "--failure-threshold", str(probe.failure_threshold),
                "--success-threshold", str(probe.success_threshold)]
        for host, port in backends:
            args += ["--backend", f"{host}:{port}"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT)
        wait_for(lambda: "listening on" in self.log(), 60, "the service proxy to listen", alive=self.alive,
                 detail=self.log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the service proxy exited {self.proc.returncode}:\n{self.log()}", pytrace=False)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sessions_ended(tag: str) -> bool:
    """Whether sshd on the pods has ended every ssh session of the launcher tagged ``tag``
    (its clients frozen, they stop answering sshd's ``ClientAlive`` probes): no worker's lease
    wrapper has an sshd session process (``sshd: USER@notty``) among its ancestors any more."""
    table = processes()
    wrappers = [pid for pid, (_, env, argv) in table.items()
                if env.get(TAG) == tag and argv[1:3] == ["-m", "elastic.worker.lease"]]

    def in_session(pid: int) -> bool:
        seen = set()
        while pid in table and pid not in seen:
            seen.add(pid)
            ppid, _, argv = table[pid]
            if argv and argv[0].startswith("sshd:") and "@" in argv[0]:
                return True
            pid = ppid
        return False
    return bool(wrappers) and not any(in_session(pid) for pid in wrappers)


def step_times(metrics: Path, since: float, until: float) -> list[float]:
    """The times between two progress records (training steps) within (since, until)."""
    times = sorted(r.time for r in read_records(metrics) if r.event == "progress" and since < r.time < until)
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


@pytest.mark.timeout(1200)
def test_a_frozen_leaders_world_is_adopted_through_the_service_and_the_leader_is_fenced_on_wake(tmp_path):
    prefix, block_lock = claim_block()
    port = free_port()
    service, bind_a, bind_b = f"{prefix}.1", f"{prefix}.2", f"{prefix}.3"
    adopt = ("--rendezvous-port", str(port), "--rendezvous-address", service, "--adopt-window", "90")
    proxy = Service(tmp_path, (service, port), [(bind_a, port), (bind_b, port)])
    a = b = None
    try:
        with running_cluster(tmp_path / "cluster", workers=2) as cluster:
            job = f"freeze-{uuid.uuid4().hex[:8]}"
            a = Launcher(cluster, tmp_path, job, "a", (*adopt, "--rendezvous-bind", bind_a), 2, 2)
            wait_for(lambda: a.says(f"elastic-run: leading job {job}"), START_TIMEOUT, "a to lead",
                     alive=a.alive, detail=a.tail)
            b = Launcher(cluster, tmp_path, job, "b", (*adopt, "--rendezvous-bind", bind_b), 2, 2)
            wait_for(lambda: b.says(f"elastic-run: standing by for job {job} (led by a)"), START_TIMEOUT,
                     "b to stand by", alive=b.alive, detail=b.tail)
            wait_for(lambda: trains(a, 0), START_TIMEOUT, "a's world to train", interval=0.2, alive=a.alive,
                     detail=a.tail)
            assert f"{bind_a}:{port} Ready" in proxy.log(), proxy.log()
            assert f"{bind_b}:{port} Ready" not in proxy.log(), proxy.log()
            workers = sorted(a.trainers())
            assert len(workers) == 2

            frozen = launcher_tree(a.proc.pid)
            signal_all(frozen, signal.SIGSTOP)
            stopped = time.time()
            wait_for(lambda: b.says(f"elastic-run: leading job {job}"), GONE_TIMEOUT, "b to lead", interval=0.05,
                     alive=b.alive, detail=b.tail)
            leading = time.time()
            assert leading - stopped <= LEAD_BOUND, \
                f"b led {leading - stopped:.1f} s after the stop, past the Lease's {LEASE:g} s + 5 s"
            wait_for(lambda: b.says(f"job {job}: took over from a: adopting its running world"), GONE_TIMEOUT,
                     "b to say it adopts", alive=b.alive, detail=b.tail)
            wait_for(lambda: any(r.kind == "adopted" for r in read_events(b.events)), GONE_TIMEOUT + 60,
                     "b's driver to adopt the running world", alive=b.alive,
                     detail=lambda: f"{b.tail()}\n--- service:\n{proxy.log()}")
            adopted = time.time()
            wait_for(lambda: trains(a, adopted), START_TIMEOUT, "the adopted world to train on", interval=0.2,
                     alive=b.alive, detail=b.tail)
            assert sorted(a.trainers()) == workers, "a training process was started again"
            assert not b.trainers(), "b started training processes for the adopted world"
            assert f"{bind_a}:{port} not Ready" in proxy.log() and f"{bind_b}:{port} Ready" in proxy.log(), \
                proxy.log()

            # a node that comes back after sshd on the pods gave its sessions up: then an ssh
            # client's exit on the wake asks the old driver for an abort (what it must withhold)
            wait_for(lambda: sessions_ended(a.tag), GONE_TIMEOUT, "sshd on the pods to end the frozen "
                     "launcher's ssh sessions", detail=a.tail)
            a_before, b_before = len(read_events(a.events)), len(read_events(b.events))
            signal_all([pid for pid in frozen if pid != a.proc.pid], signal.SIGCONT)
            wait_for(lambda: any(r.kind == "abort_withheld" for r in read_events(a.events)[a_before:]),
                     GONE_TIMEOUT, "the old leader's driver, woken before its fence, to withhold the abort "
                     "an ssh client's exit asks for", detail=lambda: f"{a.tail()}\n{read_events(a.events)[a_before:]}")
            woke = time.time()
            signal_all([a.proc.pid], signal.SIGCONT)
            assert a.proc.wait(timeout=GONE_TIMEOUT) == EXIT_FENCED, a.tail()
            fenced = time.time()
            assert a.says(f"elastic-run: fenced: no longer the leader of job {job}: "), a.tail()
            assert "without touching the workers" in a.log().splitlines()[-1], a.tail()
            wait_for(lambda: not [p for p in tagged(a.tag) if p in frozen], GONE_TIMEOUT,
                     "no process of the fenced leader left", detail=lambda: str(tagged(a.tag)))
            acted = [r.kind for r in read_events(a.events)[a_before:] if r.kind in WORLD_KINDS]
            assert not acted, f"the fenced leader's driver acted after it woke: {acted}"
            after = time.time()
            wait_for(lambda: trains(a, after), START_TIMEOUT, "the world to train on after the wake",
                     interval=0.2, alive=b.alive, detail=b.tail)
            assert sorted(a.trainers()) == workers, "the adopted workers were touched"
            disturbed = [r.kind for r in read_events(b.events)[b_before:] if r.kind in {"reset", "abort"}]
            assert not disturbed, f"the adopted world was disturbed after the old leader woke: {disturbed}"
            gaps = step_times(a.metrics, stopped - 30, time.time())
            gap = longest_gap(a.metrics, stopped - 30, time.time())
            print(f"\nadoption after SIGSTOP: standby leading {leading - stopped:.1f} s, world adopted "
                  f"{adopted - stopped:.1f} s after the stop; longest gap between steps {gap:.1f} s, "
                  f"median {statistics.median(gaps):.2f} s; old leader fenced {fenced - woke:.1f} s after "
                  "SIGCONT")
            assert b.proc.wait(timeout=START_TIMEOUT * 2) == 0, b.tail()
    finally:
        for launcher in (a, b):
            if launcher is not None:
                launcher.kill_everything()
        proxy.close()
        block_lock.close()
