#!/usr/bin/env python3
"""bench-elastic's launcher-loss scenario: what losing the launcher mid-epoch costs.

    scripts/benchmarks/bench_launcher_loss.py [--project DIR]... [--signals SIGKILL,SIGSTOP,SIGTERM]
                                   [--rounds N] [--at-samples N] [--keep-logs DIR]

For each project tree (``--project``, default this clone; give any other
clone of main with its own ``.venv`` for a baseline side by side) and each signal, ``--rounds`` times,
on a local cluster of two one-slot pods: ``elastic-run`` runs ``training.mnist --synthetic``
(6,000 samples an epoch, batch 16, ``--commit-every 5``, ``--checkpoint-dir``);
once the epoch has reached ``--at-samples`` (1,600) samples the launcher is lost:

- SIGKILL: every launcher process (elastic-run and everything under it: horovodrun, the
  discovery daemon, the ssh clients) killed at once; the kernel closes their connections;
- SIGSTOP: every launcher process stopped: a node gone without a word, the connections stay
  open and silent (the stopped processes are killed at the end of the round);
- SIGTERM: elastic-run alone gets it (a drain, an eviction; the pod's grace is 60 s, after
  which everything left is SIGKILLed, as the kubelet does).

Then ``elastic-run`` is started again with the same arguments (the Job's retry; for SIGTERM once
elastic-run has exited). Measured from the signal: seconds until no training process of the
old run is left ("old world gone"), seconds until the retry's world trains (its first progress
record), the samples trained again as a share of an epoch (the old run's last progress record
minus where the retry resumed: its "resuming from" line, else the epoch's start), and whether a
training process of the old run was alive while one of the retry's was ("two worlds").
Goals: old world gone < 10 s; training again < 30 s; rollback at most one commit
interval after SIGKILL, none after SIGTERM; never two worlds. Below the table, each retry's own
start-up line (``elastic.launch.phases``, a build that prints it): where its time went, phase by
phase (the daemon, the hosts' preparation, the workers' start, their imports, the first step).
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from localcluster.testing import running_cluster  # noqa: E402
from shared.exitcodes import EXIT_OK, EXIT_USAGE  # noqa: E402
from shared.metrics_record import MetricsRecord, read_records  # noqa: E402

TAG = "BENCH_LAUNCHER_LOSS_TAG"
EPOCH = 6000
BATCH = 16
PODS = 2
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGSTOP": signal.SIGSTOP, "SIGTERM": signal.SIGTERM}
POD_GRACE = 60.0
TIMEOUT = 300.0
# a checkpoint's or a worker's own snapshot's (training/snapshots.py) resume line
RESUMED = re.compile(r"resuming from (?:local snapshot )?\S+ \(epoch (\d+), (\d+) samples done\)")
PHASES = re.compile(r"training [\d.]+ s after the start: .*")  # elastic-run's start-up line (elastic.launch.phases)


@dataclass
class Round:
    project: str
    signal: str
    gone: float | None = None
    trains: float | None = None
    rolled_back: float | None = None  # share of an epoch
    two_worlds: bool = False
    note: str = ""
    extra: dict = field(default_factory=dict)


def processes() -> dict[int, tuple[int, dict[str, str], list[str]]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            if not raw:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        pairs = dict(i.decode(errors="replace").partition("=")[::2] for i in environ if b"=" in i)
        found[int(entry.name)] = (ppid, pairs, raw.decode(errors="replace").rstrip("\0").split("\0"))
    return found


def tagged(tag: str, variable: str = TAG) -> list[int]:
    """Every live process whose environment has ``variable`` = ``tag`` (one launcher's)."""
    return [pid for pid, (_, e, _) in processes().items() if e.get(variable) == tag]


def trainers(tag: str, variable: str = TAG) -> list[int]:
    """The training processes among ``tagged``'s."""
    return [pid for pid, (_, e, argv) in processes().items()
            if e.get(variable) == tag and argv[1:3] == ["-m", "training.mnist"]]


def tree(root: int) -> list[int]:
    procs = processes()
    found, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return sorted(found)


def progress_records(path: Path) -> list[MetricsRecord]:
    """The progress records of a metrics file so far (a partial last line is skipped)."""
    return [r for r in read_records(path) if r.event == "progress"]


def position(rec: MetricsRecord) -> int:
    """Samples trained since the run began, from a progress record."""
    return (rec.epoch - 1) * EPOCH + rec.samples


class Job:
    def __init__(self, project: Path, cluster, work: Path, name: str):
        self.tag = os.urandom(8).hex()
        self.log_path = work / f"{name}.log"
        self.metrics = work / "metrics.jsonl"
        bin_dir = project / ".venv" / "bin"
        env = dict(os.environ)
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # a baseline clone is read, never written
        for name_ in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET", "ELASTIC_JOB_ID",
                      "PYTHONPATH"):
            env.pop(name_, None)
        env[TAG] = self.tag
        args = [str(bin_dir / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
                "--kubeconfig", str(cluster.kubeconfig), "--ssh-port", str(cluster.ssh_port),
                "--ssh-identity-file", str(cluster.identity), "--network-interface", "lo",
                "--min-np", str(PODS), "--max-np", str(PODS), "--elastic-timeout", "120", "--stall-timeout", "0",
                "-x", "OMP_NUM_THREADS=1", "--",
                "python", "-m", "training.mnist", "--synthetic", "--synthetic-size", str(EPOCH), "--epochs", "20",
                "--batch-size", str(BATCH), "--commit-every", "5", "--log-every", "5", "--debug-step-delay", "0.05",
                "--checkpoint-dir", str(work / "checkpoints"), "--metrics-file", str(self.metrics)]
        self.started = time.time()
        with open(self.log_path, "wb") as log:  # cwd: the project, whose modules the workers import
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         cwd=project)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill_everything(self) -> None:
        for pid in tagged(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def until(predicate, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def one_round(project: Path, cluster, work: Path, sig_name: str, at_samples: int) -> Round:
    rnd = Round(project=str(project), signal=sig_name)
    work.mkdir(parents=True)
    old = Job(project, cluster, work, "old")
    new: Job | None = None
    stopped: list[int] = []
    try:
        at = until(lambda: next((r for r in progress_records(old.metrics) if position(r) >= EPOCH + at_samples), None),
                   TIMEOUT * 2, 0.05)
        if at is None:
            rnd.note = "the job never reached the chosen sample"
            return rnd
        t0 = time.monotonic()
        wall0 = time.time()
        if sig_name == "SIGTERM":
            old.proc.send_signal(signal.SIGTERM)
            try:
                old.proc.wait(timeout=POD_GRACE)
            except subprocess.TimeoutExpired:
                rnd.note = "elastic-run outlived the pod's grace"
                for pid in tree(old.proc.pid):
                    os.kill(pid, signal.SIGKILL)
                old.proc.wait()
        else:
            stopped = tree(old.proc.pid)
            for pid in stopped:
                try:
                    os.kill(pid, SIGNALS[sig_name])
                except ProcessLookupError:
                    pass
        last = [r for r in progress_records(old.metrics) if r.time <= time.time()]
        trained = max(position(r) for r in last)
        rnd.extra["retry_after"] = time.monotonic() - t0
        new = Job(project, cluster, work, "new")
        seen_new = None
        while time.monotonic() - t0 < TIMEOUT:
            olds, news = trainers(old.tag), trainers(new.tag)
            if olds and news:
                rnd.two_worlds = True
            if not olds and rnd.gone is None:
                rnd.gone = time.monotonic() - t0
            if news and seen_new is None:
                seen_new = time.time()
            if seen_new is not None and rnd.trains is None \
                    and any(r.time > seen_new for r in progress_records(new.metrics)):
                rnd.trains = time.monotonic() - t0
            if rnd.gone is not None and rnd.trains is not None:
                break
            time.sleep(0.1)
        # the old world may train on after the signal (a frozen launcher's workers, until their
        # lease ends): what it trained until it was gone is what a resume can lose
        upto = min(wall0 + (rnd.gone if rnd.gone is not None else TIMEOUT), seen_new or float("inf"))
        trained = max([trained] + [position(r) for r in progress_records(old.metrics) if r.time <= upto])
        resumed = RESUMED.search(new.log())
        start = (int(resumed.group(1)) - 1) * EPOCH + int(resumed.group(2)) if resumed else \
            (at.epoch - 1) * EPOCH
        rnd.rolled_back = max(0, trained - start) / EPOCH
        rnd.extra.update({"trained": trained, "resumed_at": start, "signal_time": wall0})
        said = PHASES.search(new.log()) if rnd.trains is not None else None
        if said is None and rnd.trains is not None:  # said at the first step: moments after the retry trains
            said = until(lambda: PHASES.search(new.log()), 30)
        if said:
            rnd.extra["phases"] = said.group(0)
        if rnd.trains is None:
            rnd.note = "the retry did not train within the timeout"
        return rnd
    finally:
        old.kill_everything()
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if new is not None:
            new.kill_everything()


def fmt(x: float | None, pattern: str = "{:.1f}") -> str:
    return "-" if x is None else pattern.format(x)


def table(rounds: list[Round]) -> str:
    head = ("build", "signal", "old world gone (s)", "retry trains (s)", "rolled back (epoch)", "two worlds", "note")
    rows = [(Path(r.project).name, r.signal, fmt(r.gone), fmt(r.trains), fmt(r.rolled_back, "{:.0%}"),
             "yes" if r.two_worlds else "no", r.note) for r in rounds]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in (head, *rows)]
    return "\n".join(lines)


def run(projects: list[Path], signals: list[str], rounds: int, at_samples: int, keep: Path | None) -> list[Round]:
    work = Path(tempfile.mkdtemp(prefix="bench-launcher-loss-", dir=keep))
    out: list[Round] = []
    for project in projects:
        with running_cluster(work / f"cluster-{project.name}", workers=PODS) as cluster:
            for sig_name in signals:
                for i in range(rounds):
                    rnd = one_round(project, cluster, work / f"{project.name}-{sig_name}-{i}", sig_name, at_samples)
                    print(f"bench-launcher-loss: {project.name} {sig_name}: gone {fmt(rnd.gone)} s, trains "
                          f"{fmt(rnd.trains)} s, rolled back {fmt(rnd.rolled_back, '{:.0%}')}, two worlds "
                          f"{rnd.two_worlds} {rnd.note} {rnd.extra}", file=sys.stderr, flush=True)
                    out.append(rnd)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_launcher_loss.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--project", action="append", type=Path, default=None,
                   help="a clone with its .venv (repeat for a baseline; default: this clone)")
    p.add_argument("--signals", default="SIGKILL,SIGSTOP,SIGTERM")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--at-samples", type=int, default=1600)
    p.add_argument("--keep-logs", type=Path, default=None)
    args = p.parse_args(argv)
    signals = [s.strip() for s in args.signals.split(",") if s.strip()]
    bad = [s for s in signals if s not in SIGNALS]
    if bad or args.rounds < 1 or not 0 < args.at_samples < EPOCH:
        print(f"error: --signals wants {','.join(SIGNALS)}, --rounds >= 1, --at-samples in 1..{EPOCH - 1}",
              file=sys.stderr)
        return EXIT_USAGE
    projects = [q.resolve() for q in (args.project or [HERE.parents[1]])]
    rounds = run(projects, signals, args.rounds, args.at_samples, args.keep_logs)
    print(table(rounds))
    said = [(Path(r.project).name, r.signal, r.extra["phases"]) for r in rounds if r.extra.get("phases")]
    if said:
        print("\nwhere the retry's start-up went (elastic-run's own line, from its start):")
        for name, sig, line in said:
            print(f"  {name} {sig}: {line}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
