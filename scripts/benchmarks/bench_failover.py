#!/usr/bin/env python3
"""bench-elastic's failover scenario: the leading launcher of two (``elastic-run
--leader-election``, one job) SIGKILLed mid-epoch, taken over by today's path (no
``--adopt-window``: the standby starts the job again from the last commit) and by adoption
(``--adopt-window``: the standby adopts the running world), side by side.

    scripts/benchmarks/bench_failover.py [--modes today,adopt] [--rounds N] [--at-samples N]
                                         [--keep-logs DIR]

For each mode, ``--rounds`` times, on a local cluster of two one-slot pods: launcher ``a``
leads and trains ``training.mnist --synthetic`` (3,000 samples an epoch, batch 16,
``--commit-every 5``, ``--debug-step-delay 0.05``, ``--debug-sample-log``), launcher ``b``
stands by (Lease 3 s, renew deadline 2 s, retry 0.5 s); once the second epoch has reached
``--at-samples`` (800) samples, ``a``'s process group is SIGKILLed. Measured from the SIGKILL:
seconds until ``b`` leads; with adoption until its driver adopted the world (its
``adopted`` event); until the next training step (the first step after the kill of the
world that trains at the end, so a doomed old world's last steps do not count); the longest
gap between two kept training steps (``training.sample_audit.kept_steps``: the steps a later
rollback re-trains are not progress) from 20 s before the kill until the epoch of the kill
(with adoption: of the adoption) is done, beside the median step time before the kill; how
many of the workers' processes at the kill train on after it; and, from the per-step sample
logs (``training.sample_audit``), the samples re-trained after the takeover (rollbacks to a
world that began after the kill) and the samples of those epochs trained twice or never.
Goals (the requirement): longest gap < 10 s, every worker process kept, nothing re-trained,
twice or never.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from bench_launcher_loss import tagged, trainers, until  # noqa: E402

from localcluster.testing import running_cluster  # noqa: E402
from shared.driver_events import read_records as read_events  # noqa: E402
from shared.exitcodes import EXIT_OK, EXIT_USAGE  # noqa: E402
from shared.metrics_record import read_records  # noqa: E402
from training import sample_audit  # noqa: E402

TAG = "BENCH_FAILOVER_TAG"
EPOCH = 3000
BATCH = 16
PODS = 2
MODES = ("today", "adopt")
TIMEOUT = 300.0
ELECTION = ["--leader-election", "--leader-lease-duration", "3", "--leader-renew-deadline", "2",
            "--leader-retry-period", "0.5"]


@dataclass
class Round:
    mode: str
    leading: float | None = None
    adopted: float | None = None
    next_step: float | None = None
    gap: float | None = None
    median: float | None = None
    kept: str = "-"
    retrained: int | None = None
    twice: int | None = None
    never: int | None = None
    note: str = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Launcher:
    """One elastic-run of the round's job, ``name`` its leader identity."""

    def __init__(self, cluster, work: Path, job: str, name: str, extra: list[str]):
        self.name = name
        self.tag = uuid.uuid4().hex
        self.log_path = work / f"{name}.log"
        self.events = work / f"{name}-events.jsonl"
        bin_dir = Path(sys.executable).parent
        env = dict(os.environ)
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        for name_ in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET", "ELASTIC_JOB_ID",
                      "PYTHONPATH"):
            env.pop(name_, None)
        env[TAG] = self.tag
        args = [str(bin_dir / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
                "--kubeconfig", str(cluster.kubeconfig), "--ssh-port", str(cluster.ssh_port),
                "--ssh-identity-file", str(cluster.identity), "--network-interface", "lo",
                "--min-np", str(PODS), "--max-np", str(PODS), "--elastic-timeout", "120", "--stall-timeout", "0",
                "--job-id", job, *ELECTION, "--leader-identity", name,
                "--events-file", str(self.events), *extra, "-x", "OMP_NUM_THREADS=1", "--",
                "python", "-m", "training.mnist", "--synthetic", "--synthetic-size", str(EPOCH), "--epochs", "20",
                "--batch-size", str(BATCH), "--commit-every", "5", "--log-every", "5", "--debug-step-delay", "0.05",
                "--checkpoint-dir", str(work / "checkpoints"), "--metrics-file", str(work / "metrics.jsonl"),
                "--debug-sample-log", str(work / "samples")]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         cwd=HERE.parents[1], start_new_session=True)

    def says(self, text: str) -> bool:
        return text in self.log_path.read_text(errors="replace")

    def trainers(self) -> list[int]:
        return trainers(self.tag, TAG)

    def kill_everything(self) -> None:
        for pid in tagged(self.tag, TAG):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def steps(work: Path) -> list[dict]:
    return sorted((r for r in sample_audit.load(work / "samples") if r.get("kind") == "step"),
                  key=lambda r: float(r["time"]))


def one_round(cluster, work: Path, mode: str, at_samples: int) -> Round:
    rnd = Round(mode)
    work.mkdir(parents=True)
    job = f"failover-{uuid.uuid4().hex[:8]}"
    extra = ["--rendezvous-port", str(free_port()), "--adopt-window", "90"] if mode == "adopt" else []
    a = Launcher(cluster, work, job, "a", extra)
    b = None
    try:
        if not until(lambda: a.says(f"elastic-run: leading job {job}"), TIMEOUT):
            rnd.note = "a never led"
            return rnd
        b = Launcher(cluster, work, job, "b", extra)
        if not until(lambda: b.says("standing by for job"), TIMEOUT):
            rnd.note = "b never stood by"
            return rnd
        at = until(lambda: next((r for r in read_records(work / "metrics.jsonl")
                                 if r.event == "progress" and r.epoch == 2 and r.samples >= at_samples), None),
                   TIMEOUT * 2, 0.05)
        if at is None:
            rnd.note = "the job never reached the chosen sample"
            return rnd
        workers = sorted(a.trainers())
        killed = time.time()
        os.killpg(a.proc.pid, signal.SIGKILL)
        if until(lambda: b.says(f"elastic-run: leading job {job}"), TIMEOUT, 0.05):
            rnd.leading = time.time() - killed
        before = [r for r in steps(work) if float(r["time"]) < killed]
        if not before:
            rnd.note = "no step before the kill"
            return rnd
        epoch = since = before[-1]["epoch"]
        if mode == "adopt":  # the adoption done, then the epoch it landed in
            if not until(lambda: any(r.kind in ("adopted", "adoption_failed") for r in read_events(b.events)),
                         TIMEOUT, 0.1):
                rnd.note = "b neither adopted nor gave up"
                return rnd
            adopted = [r.time for r in read_events(b.events) if r.kind == "adopted"]
            if adopted:
                rnd.adopted = min(adopted) - killed
            else:
                rnd.note = "adoption failed"
            since = max([epoch] + [r["epoch"] for r in steps(work)])

        def settled():  # the epoch of the kill (or of the adoption) done by the world that trains now
            s = steps(work)
            return s and any(r["epoch"] > since for r in s if float(r["time"]) > killed) \
                and (b.trainers() or a.trainers())
        if not until(settled, TIMEOUT * 2, 0.5):
            rnd.note = "the training did not finish the kill's epoch"
            return rnd
        records = sample_audit.load(work / "samples")
        every = steps(work)
        last_world = every[-1]["world"]
        after = [r for r in every if float(r["time"]) > killed and r["world"] == last_world]
        rnd.next_step = float(after[0]["time"]) - killed if after else None
        kept = [float(r["time"]) for r in sample_audit.kept_steps(records) if r["rank"] == 0]
        window = [t for t in kept if killed - 20 < t]
        window = [t for t in window if t <= float(after[-1]["time"])] if after else window
        gaps = [y - x for x, y in zip(window, window[1:], strict=False)]
        rnd.gap = max(gaps, default=None)
        pre = [t for t in kept if t < killed][-50:]
        rnd.median = statistics.median([y - x for x, y in zip(pre, pre[1:], strict=False)]) if len(pre) > 1 else None
        alive = set(a.trainers()) | set(b.trainers())
        rnd.kept = f"{len(set(workers) & alive)}/{len(workers)}"
        audits = sample_audit.audit(records)
        rnd.retrained = sum(r.samples for e in audits.values() for r in e.rollbacks if r.time > killed)
        spanned = [audits[e] for e in range(epoch, since + 1) if e in audits]
        rnd.twice, rnd.never = sum(len(e.twice) for e in spanned), sum(len(e.never) for e in spanned)
        return rnd
    finally:
        a.kill_everything()
        if b is not None:
            b.kill_everything()


def fmt(x, pattern: str = "{:.1f}") -> str:
    return "-" if x is None else pattern.format(x)


def table(rounds: list[Round]) -> str:
    head = ("takeover", "kill -> standby leads (s)", "kill -> world adopted (s)", "kill -> next step (s)",
            "longest gap / median step (s)",
            "worker pids kept", "re-trained / twice / never (samples)", "note")
    names = {"today": "today's path", "adopt": "adoption"}
    rows = [(names[r.mode], fmt(r.leading), fmt(r.adopted), fmt(r.next_step),
             f"{fmt(r.gap)} / {fmt(r.median, '{:.2f}')}", r.kept,
             f"{fmt(r.retrained, '{}')} / {fmt(r.twice, '{}')} / {fmt(r.never, '{}')}", r.note) for r in rounds]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in (head, *rows))


def run(modes: list[str], rounds: int, at_samples: int, keep: Path | None) -> list[Round]:
    work = Path(tempfile.mkdtemp(prefix="bench-failover-", dir=keep))
    out = []
    with running_cluster(work / "cluster", workers=PODS) as cluster:
        for mode in modes:
            for i in range(rounds):
                rnd = one_round(cluster, work / f"{mode}-{i}", mode, at_samples)
                print(f"bench-failover: {rnd}", file=sys.stderr, flush=True)
                out.append(rnd)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_failover.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--at-samples", type=int, default=800)
    p.add_argument("--keep-logs", type=Path, default=None)
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes) or args.rounds < 1 or not 0 < args.at_samples < EPOCH:
        print(f"error: --modes wants {','.join(MODES)}, --rounds >= 1, --at-samples in 1..{EPOCH - 1}",
              file=sys.stderr)
        return EXIT_USAGE
    print(table(run(modes, args.rounds, args.at_samples, args.keep_logs)))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
