"""The fault rounds of scripts/benchmarks/bench-elastic: dirty failures on the local cluster (a vanished
node, a hung rank, a flapping host, a kill mid large message), each timed against its goal.

Scenarios (``SCENARIOS``), each run against an elastic-run job of 3 one-slot pods
(``--min-np 2``), restored to 3 pods stepping at world size 3 before every round (kill-large:
see below):

- ``freeze-notready``: every process of a pod frozen (SIGSTOP to its whole pid namespace: no
  FIN, no RST, as a vanished node), then the pod marked NotReady through the API (what the
  node controller does); once with rank 0's pod, once with another, per round.
  Goal: training resumes within 2 s of the NotReady mark.
- ``freeze-ready``: a pod (not rank 0's) frozen and left Ready (a hung process Kubernetes never
  reports). Goal: training resumes within 5 s of the freeze; the job still trains
  ``OBSERVE_S`` later and no worker was started on the hung pod (its host's blacklist
  cooldown ends within that time: ``COOLDOWN``).
- ``frozen-coordinator``: first a plain join (a pod added: Ready -> its first step, J0); then
  rank 0's pod frozen (left Ready) and a pod added at once (J1). Detection: freeze -> the
  driver loses the frozen rank (its ``worker_lost`` event), goal < 5 s. Goal: the join is
  delayed by no more than the detection time (J1 - J0 <= detection). Training without the
  frozen rank (freeze -> the first step at the new size without it) includes the joiner's
  start, as every world that adds a host waits for it: goal <= detection + J0.
- ``flap``: a pod (not rank 0's) marked NotReady and Ready again within the leave grace
  (``HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS``, 5 s). Goal: no reset (driver ``reset`` events).
- ``invalid-utf8``: every rank prints an 8 KB line per step (a chatty training log,
  ``BENCH_PRINT``) and
  rank 1 writes one line that is not UTF-8; 5 s later a pod is added. Observed for
  ``RELAY_WINDOW_S`` (30 s), or until the added pod trains if later (at most the round
  timeout; "window"): the job goes on (rank 0's steps, the longest pause but for the reset
  that takes the pod in: "join pause"), the
  output after the bad line still arrives (rank lines in elastic-run's output after it),
  the added pod trains (Ready -> its first step, its imports included). Goal: no pause over
  5 s, the pod joins.
- ``output-blocked``: the same chatty job, but nobody reads elastic-run's stdout for the
  window (30 s at least): its pipe fills, then horovodrun's; a pod added 5 s in. Goal as
  above; then the output is read again and the job must still train.
  Both run a job of their own (restarted for the next scenario).
- ``busy-rank0``: rank 0 works ``BUSY_S`` (20) s outside any collective (a checkpoint saved
  and computing, again and again: bench_elastic_job.py's $BENCH_BUSY_TRIGGER), and meanwhile
  another rank's process is SIGKILLed. Goal: nobody else is lost (exactly one rank fewer when
  training resumes, no ``worker_lost`` for rank 0's host), however long rank 0 stays out of
  its collectives (the registration barrier's deadline is 15 s).
- ``join-siblings``: two pods added together, the second with a set-up of ``SLOW_S`` (30) s
  more before hvd.init() (bench_elastic_job.py's $BENCH_SLOW_HOSTS). Figures: each one's
  Ready -> its first step, and how long before the second the first stepped ("ahead"). Goal:
  the first joins without waiting for the second's set-up (ahead > ``SLOW_S`` / 2; the
  driver's sibling wait is 5 s; before it, both joined in one reset: ahead ~ 0).
- ``kill-large``: a job whose every step allreduces a 64 MB tensor (bench_elastic_job.py,
  ``BENCH_ALLREDUCE_MB``, no delay between steps, so a kill lands mid-transfer), and a random
  rank's process SIGKILLed. Goal: training resumes within 2 s of the kill, no pause over 2 s.
  The job runs on ``LARGE_PODS`` (4) pods and loses one per round down to 2, then is restored
  (a restore costs new processes' imports, so fewer of them keep 20 rounds short).

Moments: the bench's own clock at the fault; rank 0's ``tick`` after every step (the job's
log); the driver's event log (``reset``). "resumed" is the first step at the smaller world
after the fault; "pause" the gap from the last step before the fault to that one. A kill is
"mid-allreduce" when it came later after rank 0's last step than a step's usual end -> next
large allreduce start, i.e. the next transfer was under way. A round that
does not recover within the round deadline, or whose job ends, says so and the bench goes on
(a new job is started for the next round). A frozen or killed pod is then deleted (grace 0)
and replaced by a new one.
"""
from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from discovery.hosts import SLOTS_ANNOTATION
from localcluster import procs
from localcluster.errors import ClusterError, LocalClusterError, NotFound

SCENARIOS = ("freeze-notready", "freeze-ready", "frozen-coordinator", "flap", "kill-large", "invalid-utf8",
             "output-blocked", "busy-rank0", "join-siblings")
BUSY_S = 20.0  # busy-rank0: how long rank 0 works outside collectives
SLOW_S = 30.0  # join-siblings: the second joiner's extra set-up
PODS = 3  # one slot each: the world size the rounds start from
LARGE_PODS = 4  # kill-large: the world size after each restore
OBSERVE_S = 10.0  # freeze-ready: how long after the resume the job must still train
NOTREADY_AFTER_S = 0.5  # freeze-notready: the NotReady mark this long after the freeze
# a host's first cooldown ends 4 s after its worker failed: freeze-ready's OBSERVE_S sees
# whether the driver then starts a worker on the hung pod
COOLDOWN = ("2", "4")
RELAY_WINDOW_S = 30.0  # invalid-utf8, output-blocked: how long the job is watched (stdout unread)
RELAY_JOIN_AFTER_S = 5.0  # ... and when in that window a pod is added
# ... and how long each rank's line a step is: 8 KB x 20 steps/s per rank outgrows ssh's
# channel window and the pipes in about 15 s when nobody reads
RELAY_LINE_BYTES = 8192
JOB_IDS = itertools.count(1)  # each job (and restart) logs into job-<n>/



def _at(tick: dict | None) -> float | None:
    """A tick's time, or None for no tick."""
    return None if tick is None else float(tick["t"])


def _ms(t: float | None, since: float | None) -> float | None:
    """Milliseconds from ``since`` to ``t``; None when either is unknown."""
    return None if t is None or since is None else (t - since) * 1000

class Tail:
    """The JSON lines appended to a file since the last ``poll`` (a partial last line waits)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest = path, 0, b""
        self.records: list[dict] = []

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.records
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                self.records.append(rec)
        return self.records


class Aborted(Exception):
    """The scenario cannot go on (the cluster or a job could not be brought to its start state)."""


@dataclass
class Round:
    scenario: str
    target: str  # which pod/rank the fault hit
    outcome: str = "recovered"
    values: dict[str, float | None] = field(default_factory=dict)  # ms figures, resets


class Job:
    """One elastic-run job over the cluster's worker pods (restartable: ``start`` again)."""

    def __init__(self, cluster, work: Path, bin_dir: Path, root: Path, discovery_mode: str, large_mb: float,
                 after_stop=None, slots: int = 1):
        self.c, self.work, self.bin, self.root, self.after_stop = cluster, work, bin_dir, root, after_stop
        self.mode, self.large_mb, self.slots = discovery_mode, large_mb, slots
        self.n = 0
        self.proc: subprocess.Popen | None = None
        self.log = self.events = Tail(work / "none")
        self._ticks: list[dict] = []
        self._seen = 0
        self.extra_x: list[str] = []  # more -x NAME=VALUE for the job (the relay scenarios)
        self.pipe_stdout = False  # elastic-run's stdout a pipe nobody reads until drain()
        self.drainer: threading.Thread | None = None

    def start(self) -> None:
        self.stop()
        self.n = next(JOB_IDS)
        d = self.work / f"job-{self.n}"
        d.mkdir(parents=True, exist_ok=True)
        log, events, self.stopfile = d / "job.jsonl", d / "driver-events.jsonl", d / "stop"
        self.busy_trigger, self.slow_hosts = d / "busy", d / "slow-hosts"
        self.log, self.events = Tail(log), Tail(events)
        self._ticks, self._seen = [], 0
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
        for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT"):
            env.pop(name, None)
        extra = ["-x", f"BENCH_ALLREDUCE_MB={self.large_mb:g}", "-x", "BENCH_STEP_DELAY=0"] if self.large_mb else []
        if self.slots > 1:
            extra += ["--slots-per-host", str(self.slots)]
        for x in self.extra_x:
            extra += ["-x", x]
        self.drainer = None
        self.out = open(d / "elastic-run.log", "w")
        self.proc = subprocess.Popen(
            [str(self.bin / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
             "--kubeconfig", str(self.c.kubeconfig), "--ssh-port", str(self.c.ssh_port),
             "--ssh-identity-file", str(self.c.identity), "--network-interface", "lo",
             "--min-np", "2", "--max-np", "8", "--elastic-timeout", "120",
             "--blacklist-cooldown-range", *COOLDOWN, "--discovery-mode", self.mode,
             "--events-file", str(events), "-x", "OMP_NUM_THREADS=1", "-x", f"BENCH_LOG={log}",
             "-x", f"BENCH_STOP={self.stopfile}", "-x", "BENCH_TICKS=1", *extra,
             "-x", f"BENCH_BUSY_TRIGGER={self.busy_trigger}", "-x", f"BENCH_BUSY_SECONDS={BUSY_S:g}",
             "-x", f"BENCH_SLOW_HOSTS={self.slow_hosts}", "-x", f"BENCH_SLOW_SECONDS={SLOW_S:g}",
             "--", sys.executable, str(self.root / "scripts" / "benchmarks" / "bench_elastic_job.py")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if self.pipe_stdout else self.out,
            stderr=self.out if self.pipe_stdout else subprocess.STDOUT, env=env, start_new_session=True)
        print(f"bench-elastic: started job {self.n} ({d})", file=sys.stderr, flush=True)

    def drain(self) -> None:
        """Start reading elastic-run's stdout (pipe_stdout) into the log: a thread until EOF."""
        assert self.proc is not None and self.proc.stdout is not None
        pipe, out = self.proc.stdout, self.out

        def copy() -> None:
            while chunk := os.read(pipe.fileno(), 65536):
                out.write(chunk.decode(errors="replace"))
                out.flush()

        self.drainer = threading.Thread(target=copy, name="drain", daemon=True)
        self.drainer.start()

    def output(self) -> str:
        self.out.flush()
        return (self.work / f"job-{self.n}" / "elastic-run.log").read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Ask the job to end (its stop file), then kill its process group; bounded."""
        if self.proc is None:
            return
        self.stopfile.touch()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.drainer is not None:
            self.drainer.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.out.close()
        self.proc = None
        left = orphans(str(self.c.kubeconfig))
        if left:  # elastic-run killed (SIGKILL) leaves its discovery daemon behind
            print(f"bench-elastic: job {self.n}: elastic-run left {len(left)} helper(s) running "
                  "(discovery daemon); killed", file=sys.stderr, flush=True)
            procs.signal_all(left, signal.SIGKILL)
        if self.after_stop is not None:
            self.after_stop()

    def ticks(self) -> list[dict]:
        """Rank 0's ticks so far (kept incrementally: the log grows by ~20 lines a second)."""
        records = self.log.poll()
        self._ticks.extend(r for r in records[self._seen:] if r.get("ev") == "tick")
        self._seen = len(records)
        return self._ticks

    def ticks_after(self, t: float) -> list[dict]:
        ticks = self.ticks()
        return ticks[bisect.bisect_right(ticks, t, key=lambda r: r["t"]):]

    def resets(self, since: float, until: float | None = None) -> list[dict]:
        return [e for e in self.events.poll() if e.get("kind") == "reset" and e.get("time", 0) >= since
                and (until is None or e["time"] <= until)]


def orphans(kubeconfig: str) -> list[int]:
    """Processes other than this one whose command line names the cluster's kubeconfig and
    that are not pods' (elastic-run's helpers: its discovery daemon)."""
    own = procs.namespace_of(os.getpid())
    out = []
    for pid in procs.all_pids():
        if pid == os.getpid() or procs.namespace_of(pid) != own:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if kubeconfig.encode() in cmdline and b"discovery-daemon" in cmdline:
            out.append(pid)
    return out


# -- pods ---------------------------------------------------------------------------------
def pod_namespace(cluster, name: str) -> str | None:
    """The pid namespace of the pod's init (its sshd runs with DIR/pods/<pod>/sshd_config)."""
    config = str(cluster.paths.pod_dir("default", name) / "sshd_config").encode()
    own = procs.namespace_of(os.getpid())
    for pid in procs.all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()  # sshd rewrites its argv into one string ("sshd: ... [listener]")
        except OSError:
            continue
        if config in cmdline:
            ns = procs.namespace_of(pid)
            if ns and ns != own:
                return ns
    return None


def freeze_pod(cluster, name: str) -> int:
    """SIGSTOP every process of the pod (twice over, for one forked meanwhile); how many."""
    ns = pod_namespace(cluster, name)
    if ns is None:
        raise Aborted(f"pod {name}: its pid namespace was not found (the local cluster runs pods in "
                      "pid namespaces only as root)")
    seen: set[int] = set()
    for _ in range(2):
        pids = procs.in_namespace(ns)
        procs.signal_all(pids, signal.SIGSTOP)
        seen.update(pids)
    return len(seen)


def kill_rank(cluster, name: str) -> bool:
    """SIGKILL the pod's training process (bench_elastic_job.py under python); False if none."""
    ns = pod_namespace(cluster, name)
    hit = []
    for pid in procs.in_namespace(ns) if ns else []:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if "python" in os.path.basename(exe) and any(a.endswith(b"bench_elastic_job.py") for a in argv):
            hit.append(pid)
    procs.signal_all(hit, signal.SIGKILL)
    return bool(hit)


class Bench:
    """Runs the scenarios' rounds on one cluster; collects ``Round``s."""

    def __init__(self, cluster, work: Path, bin_dir: Path, root: Path, discovery_mode: str,
                 round_timeout: float, settle_timeout: float = 240.0):
        self.c, self.work, self.bin, self.root, self.mode = cluster, work, bin_dir, root, discovery_mode
        self.round_timeout, self.settle_timeout = round_timeout, settle_timeout
        self.rounds: list[Round] = []
        self.pods: list[str] = []
        self.made = 0
        self.frozen: set[str] = set()  # pods frozen by a round that has not removed them yet
        self.job: Job | None = None

    # -- state between rounds ---------------------------------------------------------------
    def add_pod(self, slots: int | None = None) -> tuple[str, str, float]:
        """Create a worker pod (with ``slots``: that many, its ``elastic-horovod/slots``
        annotation, which the discovery daemon serves; else one); (name, ip, time it was seen
        Ready). A pod that fails to start (seen under heavy load: ``unshare: sigprocmask
        unblock failed``) is replaced, twice."""
        for attempt in range(3):
            self.made += 1
            name = f"bench-{self.made}"
            self.c.create_pod(name, annotations={SLOTS_ANNOTATION: str(slots)} if slots else None)
            try:
                ip = self.c.wait_ready(name, timeout=120)
            except LocalClusterError as exc:
                if attempt == 2:
                    raise
                print(f"bench-elastic: {exc}; another pod instead", file=sys.stderr, flush=True)
                self.remove_pod(name)
                continue
            self.pods.append(name)
            return name, ip, time.time()
        raise AssertionError("unreachable")

    def freeze(self, name: str) -> None:
        self.frozen.add(name)
        freeze_pod(self.c, name)

    def remove_pod(self, name: str, grace: int | None = 0) -> None:
        self.frozen.discard(name)
        if name in self.pods:
            self.pods.remove(name)
        try:
            self.c.delete_pod(name, grace_seconds=grace)
            self.c.wait_gone(name, timeout=120)
        except NotFound:
            pass

    def kill_strays(self) -> None:
        """Training processes a stopped job left in the pods (a worker whose ssh died goes on)."""
        for name in self.pods:
            kill_rank(self.c, name)

    def ip_of(self, name: str) -> str:
        return self.c.pod_ip(name)

    def name_of(self, ip: str) -> str | None:
        for name in self.pods:
            try:
                if self.ip_of(name) == ip:
                    return name
            except (ClusterError, NotFound):
                continue
        return None

    def settle(self, large_mb: float, pods: int = PODS) -> None:
        """``pods`` healthy pods and a job (of this kind) stepping at that world size after now;
        restarts the job when it ended or does not get there. Aborted when it cannot."""
        if self.job is None or self.job.large_mb != large_mb:
            if self.job is not None:
                self.job.stop()
            self.job = Job(self.c, self.work, self.bin, self.root, self.mode, large_mb, self.kill_strays)
        for name in list(self.frozen):  # left by a round that stopped half-way
            self.remove_pod(name)
        for _attempt in range(2):
            while len(self.pods) < pods:
                self.add_pod()
            while len(self.pods) > pods:
                self.remove_pod(self.pods[0], grace=None)
            if not self.job.alive():
                self.job.start()
            since = time.time()
            deadline = time.monotonic() + self.settle_timeout
            while time.monotonic() < deadline and self.job.alive():
                t = self.job.ticks()
                if t and t[-1]["t"] > since and t[-1]["size"] == pods:
                    return
                time.sleep(0.1)
            why = "its job ended" if not self.job.alive() else f"not at world size {pods} in {self.settle_timeout:.0f}s"
            print(f"bench-elastic: settling: {why}; restarting the job", file=sys.stderr, flush=True)
            self.job.stop()
        raise Aborted(f"the job did not step at world size {pods} after a restart")

    def rank0(self) -> tuple[str, str]:
        """(pod name, ip) of rank 0 now (the last tick's host)."""
        assert self.job is not None
        ip = self.job.ticks()[-1]["host"]
        name = self.name_of(ip)
        if name is None:
            raise Aborted(f"rank 0's host {ip} is none of the bench's pods")
        return name, ip

    def other(self, ip0: str) -> str:
        return random.choice([n for n in self.pods if self.ip_of(n) != ip0])

    def wait_resumed(self, since: float, size: int | None, host_not: str | None = None,
                     below: int | None = None) -> tuple[dict | None, str]:
        """The first tick after ``since`` at world ``size`` (any with None; with ``below``, any
        smaller than that: a fault may take more than one rank down; with ``host_not``, one
        whose rank 0 is elsewhere), within the round deadline; (tick, outcome)."""
        assert self.job is not None
        deadline = time.monotonic() + self.round_timeout
        while time.monotonic() < deadline:
            for r in self.job.ticks_after(since):
                fits = r["size"] < below if below is not None else size in (None, r["size"])
                if fits and (host_not is None or r["host"] != host_not):
                    return r, "recovered"
            if not self.job.alive():
                return None, f"job ended (exit {self.job.proc.returncode if self.job.proc else '?'}) " \
                             f"after {time.time() - since:.0f} s"
            time.sleep(0.05)
        return None, f"no recovery in {self.round_timeout:.0f} s"

    def last_tick_before(self, t: float) -> float | None:
        assert self.job is not None
        ticks = self.job.ticks()
        i = bisect.bisect_right(ticks, t, key=lambda r: r["t"])
        return ticks[i - 1]["t"] if i else None

    def first_reset(self, since: float, below: int) -> float | None:
        """The driver's first reset after ``since`` to a world smaller than ``below``."""
        assert self.job is not None
        r = [e["time"] for e in self.job.resets(since) if (e.get("detail") or {}).get("world_size", below) < below]
        return r[0] if r else None

    @staticmethod
    def lost(rnd: Round, tick: dict | None, size: int) -> None:
        """Note the ranks the fault took down: more than the one hit is a miss (a peer crashed)."""
        if tick is not None:
            rnd.values["ranks lost"] = float(size - tick["size"])
            if size - tick["size"] > 1:
                rnd.outcome = f"recovered, but {size - tick['size']} ranks lost"

    def finish(self, rnd: Round) -> None:
        self.rounds.append(rnd)
        v = ", ".join(f"{k} {x:.0f}" for k, x in rnd.values.items() if x is not None)
        print(f"bench-elastic: {rnd.scenario} ({rnd.target}): {rnd.outcome}; {v}", file=sys.stderr, flush=True)
        if (not rnd.outcome.startswith("recovered") or "not training" in rnd.outcome) and self.job is not None:
            self.job.stop()  # a job that did not recover is not measured further

    # -- scenarios --------------------------------------------------------------------------
    def freeze_notready(self, which: str) -> None:
        self.settle(0)
        assert self.job is not None
        ip0 = self.rank0()[1]
        victim = self.name_of(ip0) if which == "rank 0" else self.other(ip0)
        assert victim is not None
        rnd = Round("freeze-notready", "rank 0's pod" if which == "rank 0" else "another pod")
        t_freeze = time.time()
        self.freeze(victim)
        time.sleep(NOTREADY_AFTER_S)
        t_mark = time.time()
        self.c.set_ready(victim, False)
        tick, rnd.outcome = self.wait_resumed(t_freeze, None, below=PODS)
        self.lost(rnd, tick, PODS)
        last = self.last_tick_before(t_freeze)
        reset = self.first_reset(t_freeze, PODS)
        rnd.values |= {"reset": _ms(reset, t_mark), "resumed": _ms(_at(tick), t_mark),
                      "pause": _ms(_at(tick), last)}
        self.remove_pod(victim)
        self.finish(rnd)

    def freeze_ready(self) -> None:
        self.settle(0)
        assert self.job is not None
        victim = self.other(self.rank0()[1])
        ip = self.ip_of(victim)
        rnd = Round("freeze-ready", "another pod, left Ready")
        t_freeze = time.time()
        self.freeze(victim)
        tick, rnd.outcome = self.wait_resumed(t_freeze, None, below=PODS)
        self.lost(rnd, tick, PODS)
        last = self.last_tick_before(t_freeze)
        reset = self.first_reset(t_freeze, PODS)
        rnd.values |= {"reset": _ms(reset, t_freeze),
                      "resumed": _ms(_at(tick), t_freeze),
                      "pause": _ms(_at(tick), last)}
        if tick is not None:
            # then: still training OBSERVE_S later (not ended, not stalled by a restart onto the hung pod)
            end = time.time() + OBSERVE_S
            while time.time() < end and self.job.alive():
                time.sleep(0.2)
            t = self.job.ticks()
            held = self.job.alive() and bool(t) and t[-1]["t"] > time.time() - 2.0
            rnd.values["resets after"] = float(len(self.job.resets(tick["t"])))
            starts = [e for e in self.job.events.poll() if e.get("kind") == "worker_start"
                      and e.get("time", 0) > t_freeze and (e.get("detail") or {}).get("host") == ip]
            rnd.values["workers started on it"] = float(len(starts))
            if not held:
                rnd.outcome = f"recovered, but not training {OBSERVE_S:.0f} s later" + (
                    "" if self.job.alive() else " (job ended)")
            elif starts:
                rnd.outcome = "recovered, but a worker was started on the hung pod"
        self.remove_pod(victim)
        self.finish(rnd)

    def frozen_coordinator(self) -> None:
        self.settle(0)
        assert self.job is not None
        rnd = Round("frozen-coordinator", "rank 0's pod, left Ready, + a pod added")
        # a plain join first: Ready -> the new pod's first step (J0)
        _, ip, t_ready = self.add_pod()
        step, outcome = self.wait_step(ip, t_ready)
        if step is None:
            rnd.outcome = f"plain join: {outcome}"
            self.finish(rnd)
            return
        j0 = step - t_ready
        size = PODS + 1
        self.wait_resumed(step, size)  # rank 0 steps at the new size too
        victim, ip0 = self.rank0()
        t_freeze = time.time()
        self.freeze(victim)
        _, ip2, t_ready2 = self.add_pod()
        step2, rnd.outcome = self.wait_step(ip2, t_ready2)
        det, _ = self.wait_resumed(t_freeze, size, host_not=ip0) if step2 is not None else (None, "")
        # detection: the driver gives the frozen coordinator up (its worker_lost event); training
        # without it comes later, with the joiner, whose start (J0) the new world waits for
        lost = [e["time"] for e in self.job.events.poll() if e.get("kind") == "worker_lost"
                and e.get("time", 0) > t_freeze and (e.get("detail") or {}).get("host") == ip0]
        rnd.values |= {"join": j0 * 1000, "join, coordinator frozen": step2 and (step2 - t_ready2) * 1000,
                      "delay": step2 and (step2 - t_ready2 - j0) * 1000,
                      "detection": (lost[0] - t_freeze) * 1000 if lost else None,
                      "trained without it": _ms(_at(det), t_freeze)}
        self.remove_pod(victim)
        self.finish(rnd)

    def wait_step(self, ip: str, since: float) -> tuple[float | None, str]:
        """When the process on ``ip`` first stepped after ``since`` (its ``step`` record)."""
        assert self.job is not None
        deadline = time.monotonic() + self.round_timeout
        while time.monotonic() < deadline:
            for r in self.job.log.poll():
                if r.get("ev") == "step" and r.get("host") == ip and r["t"] > since:
                    return r["t"], "recovered"
            if not self.job.alive():
                return None, "job ended"
            time.sleep(0.05)
        return None, f"no join in {self.round_timeout:.0f} s"

    def flap(self, seconds: float, grace: float) -> None:
        self.settle(0)
        assert self.job is not None
        victim = self.other(self.rank0()[1])
        rnd = Round("flap", f"another pod NotReady for {seconds:g} s (grace {grace:g} s)")
        t0 = time.time()
        self.c.set_ready(victim, False)
        time.sleep(seconds)
        self.c.set_ready(victim, True)
        end = t0 + grace + 5.0
        while time.time() < end and self.job.alive():
            time.sleep(0.2)
        t_end = time.time()
        t = [r["t"] for r in self.job.ticks_after(t0 - 1)]
        if self.job.alive() and (not t or t[-1] < t_end - 2.0):
            # paused at the end of the window: the pause lasts until training resumes
            tick, rnd.outcome = self.wait_resumed(t_end, None)
            t = [r["t"] for r in self.job.ticks_after(t0 - 1)]
        elif not self.job.alive():
            rnd.outcome = "job ended"
        gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
        rnd.values |= {"resets": float(len(self.job.resets(t0))), "longest pause": max(gaps) * 1000 if gaps else None}
        self.finish(rnd)

    def kill_large(self, mb: float) -> None:
        # LARGE_PODS ranks, one killed per round while at least 3 remain: a restore (new pods'
        # imports) every LARGE_PODS - 2 rounds
        t = self.job.ticks() if self.job is not None and self.job.large_mb == mb and self.job.alive() else []
        if not t or t[-1]["size"] < 3 or len(self.pods) < 3:
            self.settle(mb, LARGE_PODS)
        assert self.job is not None
        time.sleep(random.uniform(0.0, 1.0))
        size = self.job.ticks()[-1]["size"]
        victim = random.choice(self.pods)
        ip0 = self.rank0()[1]
        rnd = Round("kill-large", "rank 0" if self.ip_of(victim) == ip0 else "another rank")
        t_kill = time.time()
        if not kill_rank(self.c, victim):
            raise Aborted(f"no training process found in pod {victim}")
        tick, rnd.outcome = self.wait_resumed(t_kill, None, below=size)
        self.lost(rnd, tick, size)
        ticks = self.job.ticks()
        before = [r for r in ticks if r["t"] <= t_kill]
        # the next allreduce had begun if the kill came later than a step's usual end -> next start
        lead = statistics.median([b["t0"] - a["t"] for a, b in zip(ticks, ticks[1:], strict=False)
                                  if b.get("t0") and b["size"] == a["size"]] or [0.0])
        last = before[-1]["t"] if before else None
        in_flight = last is not None and t_kill - last > lead
        reset = self.first_reset(t_kill, size)
        rnd.values |= {"reset": _ms(reset, t_kill), "resumed": _ms(_at(tick), t_kill),
                      "pause": _ms(_at(tick), last), "in flight": float(in_flight),
                      "step": statistics.median([r["t"] - r["t0"] for r in before[-20:]]) * 1000 if before else None}
        self.remove_pod(victim)
        self.finish(rnd)

    # -- the failure detector (Horovod patch 0108) -------------------------------------------
    def pod_ranks_frozen(self) -> None:
        """``pod-ranks-frozen``: a job of its own over 2 pods of ``POD_RANKS`` (4) slots each
        (world 8); the ranks of the pod that is not rank 0's frozen at once (SIGSTOP to its whole
        pid namespace), the pod left Ready. Goal: exactly 4 lost (the driver's ``worker_lost``
        events), the other 4 train on at world size 4 ``OBSERVE_S`` after the resume."""
        if self.job is not None:
            self.job.stop()
            self.job = None
        for name in list(self.pods):
            self.remove_pod(name)
        rnd = Round("pod-ranks-frozen", f"the {POD_RANKS} ranks of one pod of 2, left Ready")
        job = Job(self.c, self.work, self.bin, self.root, self.mode, 0, self.kill_strays, slots=POD_RANKS)
        size = 2 * POD_RANKS
        try:
            while len(self.pods) < 2:
                # the slots come from the pod, as discovery serves them (elastic-run's
                # --slots-per-host does not override what the daemon says: with it alone
                # the world was 2 x 1 and never the 8 this round waits for)
                self.add_pod(POD_RANKS)
            job.start()
            self.job = job
            # the start has a deadline of its own (POD_RANKS_START_S); what is measured, the
            # freeze, keeps the round deadline
            round_timeout, self.round_timeout = self.round_timeout, max(self.round_timeout, POD_RANKS_START_S)
            try:
                tick, outcome = self.wait_resumed(time.time(), size)
            finally:
                self.round_timeout = round_timeout
            if tick is None:
                raise Aborted(f"the job of {size} ranks did not start: {outcome}")
            victim = self.other(self.rank0()[1])
            ip = self.ip_of(victim)
            t_freeze = time.time()
            self.freeze(victim)
            tick, rnd.outcome = self.wait_resumed(t_freeze, None, below=size)
            last = self.last_tick_before(t_freeze)
            rnd.values |= {"resumed": _ms(_at(tick), t_freeze),
                          "pause": _ms(_at(tick), last)}
            if tick is not None:
                end = time.time() + OBSERVE_S
                while time.time() < end and job.alive():
                    time.sleep(0.2)
                lost = [e for e in job.events.poll() if e.get("kind") == "worker_lost" and e.get("time", 0) > t_freeze]
                rnd.values["ranks lost"] = float(len(lost))
                t = job.ticks()
                held = job.alive() and bool(t) and t[-1]["t"] > time.time() - 2.0 and t[-1]["size"] == POD_RANKS
                others = [e for e in lost if (e.get("detail") or {}).get("host") != ip]
                if others or len(lost) != POD_RANKS:
                    rnd.outcome = f"recovered, but {len(lost)} ranks lost ({len(others)} on the healthy pod)"
                elif not held:
                    rnd.outcome = f"recovered, but not training at world size {POD_RANKS} {OBSERVE_S:.0f} s later"
            self.remove_pod(victim)
            self.finish(rnd)
        finally:
            job.stop()
            self.job = None
            for name in list(self.pods):
                self.remove_pod(name)

    def driver_frozen(self) -> None:
        """``driver-frozen``: the Horovod driver (elastic-run's horovodrun process) stopped for
        ``DRIVER_FREEZE_S`` (6 s, SIGSTOP then SIGCONT) while the world of 3 trains. Goal:
        nobody lost, training at world size 3 ``OBSERVE_S`` after the thaw."""
        self.settle(0)
        assert self.job is not None and self.job.proc is not None
        rnd = Round("driver-frozen", f"the driver stopped {DRIVER_FREEZE_S:g} s")
        driver = driver_pid(self.job.proc.pid)
        if driver is None:
            raise Aborted("the job's horovodrun process was not found")
        t_freeze = time.time()
        os.kill(driver, signal.SIGSTOP)
        try:
            time.sleep(DRIVER_FREEZE_S)
        finally:
            os.kill(driver, signal.SIGCONT)
        t_thaw = time.time()
        end = t_thaw + OBSERVE_S
        while time.time() < end and self.job.alive():
            time.sleep(0.2)
        lost = [e for e in self.job.events.poll() if e.get("kind") == "worker_lost" and e.get("time", 0) > t_freeze]
        t = self.job.ticks()
        rnd.values |= {"ranks lost": float(len(lost)), "resets after": float(len(self.job.resets(t_freeze)))}
        if lost:
            rnd.outcome = f"{len(lost)} ranks lost"
        elif not (self.job.alive() and t and t[-1]["t"] > time.time() - 2.0 and t[-1]["size"] == PODS):
            rnd.outcome = f"not training at world size {PODS} {OBSERVE_S:.0f} s after the thaw" + (
                "" if self.job.alive() else " (job ended)")
        self.finish(rnd)

    def pod_frozen_thawed(self) -> None:
        """``pod-frozen-thawed``: a pod (not rank 0's) frozen for ``THAW_AFTER_S`` (8 s) and
        thawed, left Ready all along. Measured: the pause (last step before the freeze -> first
        step of the world without it) and the seconds from the thaw until the world has a rank
        on it again (its first ``step`` record). Goal: back within 60 s."""
        self.settle(0)
        assert self.job is not None
        victim = self.other(self.rank0()[1])
        ip = self.ip_of(victim)
        rnd = Round("pod-frozen-thawed", f"another pod frozen {THAW_AFTER_S:g} s, left Ready")
        ns = pod_namespace(self.c, victim)
        t_freeze = time.time()
        self.freeze(victim)
        time.sleep(THAW_AFTER_S)
        if ns is not None:
            procs.signal_all(procs.in_namespace(ns), signal.SIGCONT)
        self.frozen.discard(victim)
        t_thaw = time.time()
        tick, rnd.outcome = self.wait_resumed(t_freeze, None, below=PODS)
        last = self.last_tick_before(t_freeze)
        rnd.values["pause"] = _ms(_at(tick), last)
        deadline = time.monotonic() + max(self.round_timeout, THAW_BACK_GOAL_S + 30.0)
        back = None
        while back is None and time.monotonic() < deadline and self.job.alive():
            for r in self.job.log.poll():
                if r.get("ev") == "step" and r.get("host") == ip and r["t"] > t_thaw:
                    back = r["t"]
                    break
            time.sleep(0.1)
        rnd.values["back after thaw"] = back and (back - t_thaw) * 1000
        if back is None:
            rnd.outcome = "no rank on the thawed pod again" + ("" if self.job.alive() else " (job ended)")
        self.finish(rnd)
    def relay(self, blocked: bool) -> None:
        """invalid-utf8 (blocked False) or output-blocked (True): see the module docstring."""
        if self.job is not None:
            self.job.stop()
        work = self.work / "relay"
        work.mkdir(parents=True, exist_ok=True)
        garble = work / f"garble-{time.time():.0f}"
        self.job = Job(self.c, self.work, self.bin, self.root, self.mode, 0, self.kill_strays)
        self.job.extra_x = [f"BENCH_PRINT={RELAY_LINE_BYTES}"] + ([] if blocked else [f"BENCH_GARBLE={garble}"])
        self.job.pipe_stdout = blocked
        self.settle(0)
        job = self.job
        name = "output-blocked" if blocked else "invalid-utf8"
        rnd = Round(name, "elastic-run's stdout unread" if blocked else "rank 1")
        t0 = time.time()
        if not blocked:
            garble.touch()
        time.sleep(RELAY_JOIN_AFTER_S)
        pod, ip, t_ready = self.add_pod()
        # the window: RELAY_WINDOW_S, or longer until the added pod trains (its imports are
        # slow under load), so that its join falls inside it (stdout still unread)
        step, outcome = self.wait_step(ip, t_ready)
        end = t0 + RELAY_WINDOW_S
        while time.time() < end and job.alive():
            time.sleep(0.2)
        rnd.values["window"] = (time.time() - t0) * 1000
        ticks = job.ticks_after(t0)
        t = [r["t"] for r in ticks]
        last = self.last_tick_before(t0)
        seq = ([(last, PODS)] if last else []) + [(r["t"], r["size"]) for r in ticks]
        # the join's own pause (the reset that takes the pod in) apart from the others
        gaps = [b - a for (a, sa), (b, sb) in zip(seq, seq[1:], strict=False) if sa == sb]
        joined = [b - a for (a, sa), (b, sb) in zip(seq, seq[1:], strict=False) if sa != sb]
        gaps.append(time.time() - seq[-1][0] if seq else RELAY_WINDOW_S)  # the last step -> the window's end
        rnd.values |= {"steps in window": float(len(t)), "longest pause": max(gaps) * 1000,
                       "join pause": max(joined) * 1000 if joined else None}
        if blocked and job.alive():
            job.drain()
        rnd.values["join"] = step and (step - t_ready) * 1000
        if not job.alive():
            rnd.outcome = f"job ended (exit {job.proc.returncode if job.proc else '?'})"
        elif step is None:
            rnd.outcome = f"the pod added in the window: {outcome}"
        elif max(gaps) > 5.0:
            rnd.outcome = "recovered, but training paused"
        if blocked:
            # what was queued comes first, then the count of what did not fit (if anything)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and job.alive() and "bytes of output dropped" not in job.output():
                time.sleep(0.5)
            rnd.values["dropped"] = float(sum(int(m) for m in re.findall(
                r"(\d+) bytes of output dropped", job.output())))
        else:
            text = job.output()
            at = text.find("caf")
            rnd.values["lines after"] = float(text.count("<stdout>:step ", at) if at >= 0 else 0)
            if at < 0 or not rnd.values["lines after"]:
                rnd.outcome = "the output stopped at the invalid line" + (
                    "" if rnd.outcome == "recovered" else f"; {rnd.outcome}")
        self.remove_pod(pod)
        self.finish(rnd)
        job.stop()
        self.job = None  # the next scenario starts a plain job
    def busy_rank0(self) -> None:
        self.settle(0)
        assert self.job is not None
        ip0 = self.rank0()[1]
        victim = self.other(ip0)
        rnd = Round("busy-rank0", f"rank 0 busy {BUSY_S:g} s outside collectives, another rank killed")
        self.job.busy_trigger.touch()
        marker = Path(f"{self.job.busy_trigger}.busy")
        deadline = time.monotonic() + self.round_timeout
        while not marker.exists() and time.monotonic() < deadline and self.job.alive():
            time.sleep(0.05)
        if not marker.exists():
            raise Aborted("rank 0 did not start its work outside collectives")
        t_kill = time.time()
        if not kill_rank(self.c, victim):
            raise Aborted(f"no training process found in pod {victim}")
        self.round_timeout += BUSY_S
        try:
            tick, rnd.outcome = self.wait_resumed(t_kill, None, below=PODS)
        finally:
            self.round_timeout -= BUSY_S
        self.lost(rnd, tick, PODS)
        lost = [e for e in self.job.events.poll() if e.get("kind") == "worker_lost" and e.get("time", 0) > t_kill]
        rank0_lost = any((e.get("detail") or {}).get("host") == ip0 for e in lost)
        rnd.values |= {"resumed": _ms(_at(tick), t_kill), "rank 0 lost": float(rank0_lost),
                      "barrier busy": float(len([e for e in self.job.events.poll()
                                                 if e.get("kind") == "barrier_busy" and e.get("time", 0) > t_kill]))}
        if rank0_lost:
            rnd.outcome = "recovered, but the busy rank 0 was lost"
        self.remove_pod(victim)
        self.finish(rnd)

    def join_siblings(self) -> None:
        self.settle(0)
        assert self.job is not None
        rnd = Round("join-siblings", f"2 pods added, the second with {SLOW_S:g} s more set-up")
        fast, ip_fast, t_fast = self.add_pod()
        slow, ip_slow, t_slow = self.add_pod()
        self.job.slow_hosts.write_text(ip_slow + "\n")
        step_fast, rnd.outcome = self.wait_step(ip_fast, t_fast)
        step_slow, outcome = self.wait_step(ip_slow, t_slow) if step_fast is not None else (None, "")
        if step_fast is not None and step_slow is None:
            rnd.outcome = f"slow sibling: {outcome}"
        rnd.values |= {"join": step_fast and (step_fast - t_fast) * 1000,
                      "join, slow sibling": step_slow and (step_slow - t_slow) * 1000,
                      "ahead": step_fast and step_slow and (step_slow - step_fast) * 1000}
        self.remove_pod(fast, grace=None)
        self.remove_pod(slow, grace=None)
        self.finish(rnd)

    def close(self) -> None:
        if self.job is not None:
            self.job.stop()


def driver_pid(root: int) -> int | None:
    """The horovodrun process (the elastic driver) under elastic-run's process ``root``."""
    todo, seen = [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"horovodrun") or a == b"elastic.driver.hvdrun" for a in argv):
            return pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return None


DETECTOR_SCENARIOS = ("pod-ranks-frozen", "driver-frozen", "pod-frozen-thawed")
POD_RANKS = 4  # pod-ranks-frozen: slots per pod
# pod-ranks-frozen: how long its job of 2 x POD_RANKS ranks may take to step at that size (8
# processes importing torch on a loaded 2-core machine took over the 120 s round deadline)
POD_RANKS_START_S = 600.0
DRIVER_FREEZE_S = 6.0  # driver-frozen: how long the driver is stopped
THAW_AFTER_S = 8.0  # pod-frozen-thawed: how long the pod is frozen
THAW_BACK_GOAL_S = 60.0


def detector_report(rounds: list[Round], table) -> None:
    """The failure detector's rounds and their goals."""
    mine = [r for r in rounds if r.scenario in DETECTOR_SCENARIOS]
    if not mine:
        return
    rows = [(r.scenario, r.target, fmt(r.values.get("pause")), fmt(r.values.get("ranks lost")),
             fmt(r.values.get("back after thaw")), r.outcome) for r in mine]
    table("failure detector rounds (ms)", ("scenario", "hit", "pause", "ranks lost", "back after thaw", "outcome"),
          rows)
    goals = []
    for r in mine:
        v = r.values
        if r.scenario == "pod-ranks-frozen":
            goals.append(("4 ranks of one pod frozen: ranks lost", fmt(v.get("ranks lost")), str(POD_RANKS),
                          "met" if r.outcome == "recovered" else f"MISSED; {r.outcome}"))
        elif r.scenario == "driver-frozen":
            goals.append((f"driver frozen {DRIVER_FREEZE_S:g} s: ranks lost", fmt(v.get("ranks lost")), "0",
                          "met" if r.outcome == "recovered" else f"MISSED; {r.outcome}"))
        else:
            b = v.get("back after thaw")
            goals.append((f"pod frozen {THAW_AFTER_S:g} s then thawed: back after the thaw", fmt(b),
                          f"< {THAW_BACK_GOAL_S * 1000:.0f}",
                          "met" if b is not None and b < THAW_BACK_GOAL_S * 1000 else f"MISSED; {r.outcome}"))
    table("failure detector goals", ("measurement", "value", "goal", "status"), goals)


# -- report -------------------------------------------------------------------------------
OTHER = ("ranks lost", "resets", "resets after", "workers started on it", "join", "delay", "detection",
         "trained without it", "step", "window", "steps in window", "join pause", "lines after", "dropped",
         "rank 0 lost", "barrier busy", "join, slow sibling", "ahead")


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def report(rounds: list[Round], table, grace: float) -> None:
    """Per-round rows, then the goals with their status."""
    rows = []
    for r in rounds:
        v = r.values
        resumed = v.get("resumed", v.get("join, coordinator frozen"))
        rows.append((r.scenario, r.target, fmt(v.get("reset")), fmt(resumed),
                     fmt(v.get("pause", v.get("longest pause"))),
                     ", ".join(f"{k} {fmt(x)}" for k, x in v.items()
                               if k in OTHER) or "-",
                     "yes" if v.get("in flight") else ("no" if "in flight" in v else "-"), r.outcome))
    table("fault rounds (ms after the fault, or after the NotReady mark for freeze-notready)",
          ("scenario", "hit", "driver reset", "resumed", "pause", "other", "mid-allreduce", "outcome"), rows)

    goals = []

    def worst(name, rs, key, goal_ms, what):
        if not rs:
            return
        bad = [r for r in rs if r.outcome != "recovered"]
        vals = [r.values[key] for r in rs if r.values.get(key) is not None]
        top = max(vals) if vals else None
        ok = not bad and top is not None and top < goal_ms
        miss = f"; {len(bad)} of {len(rs)} rounds: {bad[0].outcome}" if bad else ""
        goals.append((f"{name}: {what}", f"{fmt(top)} (max of {len(vals)})", f"< {goal_ms:.0f}",
                      ("met" if ok else "MISSED") + miss))

    by = {s: [r for r in rounds if r.scenario == s] for s in SCENARIOS}
    worst("freeze + NotReady, rank 0's pod", [r for r in by["freeze-notready"] if r.target.startswith("rank 0")],
          "resumed", 2000, "NotReady mark -> training resumed")
    worst("freeze + NotReady, another pod", [r for r in by["freeze-notready"] if not r.target.startswith("rank 0")],
          "resumed", 2000, "NotReady mark -> training resumed")
    worst("freeze, pod left Ready", by["freeze-ready"], "resumed", 5000, "freeze -> training resumed")
    for r in by["frozen-coordinator"]:
        d, det = r.values.get("delay"), r.values.get("detection")
        ok = r.outcome == "recovered" and d is not None and det is not None and d <= det
        goals.append(("frozen coordinator: join delayed by (J1 - J0)", fmt(d), f"<= detection ({fmt(det)})",
                      "met" if ok else "MISSED" + ("" if r.outcome == "recovered" else f"; {r.outcome}")))
        goals.append(("frozen coordinator: freeze -> driver loses it (detection)", fmt(det), "< 5000",
                      "met" if det is not None and det < 5000 else "MISSED"))
        trained, j0 = r.values.get("trained without it"), r.values.get("join")
        goals.append(("frozen coordinator: freeze -> training without it (with the joiner)", fmt(trained),
                      f"<= detection + J0 ({fmt(det and j0 and det + j0)})",
                      "met" if trained is not None and det is not None and j0 is not None and trained <= det + j0
                      else "MISSED"))
    for r in by["flap"]:
        n = r.values.get("resets")
        goals.append((f"flap within the {grace:g} s grace: resets", fmt(n), "0",
                      ("met" if n == 0 and r.outcome == "recovered" else "MISSED")
                      + ("" if r.outcome == "recovered" else f"; {r.outcome}")))
    kills = by["kill-large"]
    worst("SIGKILL mid 64 MB allreduce", kills, "resumed", 2000, "kill -> training resumed")
    worst("SIGKILL mid 64 MB allreduce", kills, "pause", 2000, "pause (last step -> first step)")
    if kills:
        hits = sum(1 for r in kills if r.values.get("in flight"))
        goals.append(("SIGKILL mid 64 MB allreduce: kills that hit a transfer in flight", f"{hits} of {len(kills)}",
                      "-", "-"))
    for r in by["invalid-utf8"] + by["output-blocked"]:
        pause, join = r.values.get("longest pause"), r.values.get("join")
        what = "a rank printed invalid UTF-8" if r.scenario == "invalid-utf8" else \
            f"stdout unread {RELAY_WINDOW_S:.0f} s"
        goals.append((f"{what}: longest pause in {RELAY_WINDOW_S:.0f} s", fmt(pause), "< 5000",
                      "met" if r.outcome == "recovered" and pause is not None and pause < 5000
                      else f"MISSED; {r.outcome}"))
        goals.append((f"{what}: a pod added meanwhile trains (Ready -> first step, its imports included)",
                      fmt(join), "trains", "met" if join is not None else "MISSED"))
    for r in by["busy-rank0"]:
        n = r.values.get("ranks lost")
        goals.append((f"rank 0 busy {BUSY_S:g} s outside collectives + a kill: ranks lost", fmt(n), "1",
                      "met" if n == 1 and r.outcome == "recovered" else f"MISSED; {r.outcome}"))
    for r in by["join-siblings"]:
        a = r.values.get("ahead")
        goals.append((f"join beside a sibling with {SLOW_S:g} s more set-up: steps before it by", fmt(a),
                      f"> {SLOW_S * 500:.0f}", "met" if a is not None and a > SLOW_S * 500 else f"MISSED; {r.outcome}"))
    table("fault goals", ("measurement", "ms", "goal ms", "status"), goals)
    print("goal: training resumes < 2 s after a NotReady mark or a kill, < 5 s after a freeze Kubernetes "
          "never reports; no pause > 2 s mid large allreduce; a flap costs no reset; a frozen coordinator "
          "delays a join by no more than the detection time")
