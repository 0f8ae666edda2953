"""A chaos schedule for the demo and the end-to-end test: pods added, deleted and killed while
the job starts and trains, each step after the first waiting until the previous one took
effect in the training.

    python -m localcluster.chaos --state-dir DIR --metrics-file FILE [--steps add,kill,add]
                                [--events-file F] [--delete-pod worker-1] [--hold-file F]
                                [--timeout 900]

Steps are ``add`` (``local-cluster add-pod``), ``delete`` (``local-cluster delete-pod``, a
graceful delete) and ``kill`` (``delete-pod --grace 0``: the pod's processes are killed at
once, a hard failure); delete and kill remove the pod named by ``--delete-pod``. The
decision is a pure function of the records seen (``next_step``):

- the first step is due at once, or, with ``--events-file`` (the Horovod driver's event log,
  ``elastic-run --events-file``), as soon as the driver has started a worker: the job is
  starting, its workers are still importing their framework. Nothing waits for the training
  to run: a pod that appears during start-up must be used like any other;
- each later step is due once the world size the previous step should produce (one slot per
  pod) shows after it: in a record of rank 0's metrics file, or in the driver's events (a
  ``reset`` to that size followed by a worker's ``progress``), i.e. the job has reset and is
  training again -- so a delete or kill lands mid-epoch, with the job at full size.

With ``--hold-file`` the file exists from the start until the last step has taken effect:
give the same path to the training's ``--debug-hold-file`` (with ``--debug-step-delay``) and
the training slows down only while the schedule runs, so a short job cannot end before it.

Prints one line per step on stderr; exits 0 when every step ran, 1 when the timeout passed or
an action failed (the line says which), 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from shared.driver_events import Record, read_records
from shared.event_kinds import Kind
from shared.exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from shared.metrics_record import MetricsRecord
from shared.metrics_record import read_records as read_metrics  # rank 0's metrics file

STEPS = ("add", "delete", "kill")


def local_cluster_argv(*args: str) -> list[str]:
    """``local-cluster ARGS`` run with this Python, so no console script needs to be on PATH."""
    return [sys.executable, "-m", "localcluster.cli", *args]


@dataclass(frozen=True)
class Progress:
    """Where the schedule is: steps done, when the last one ran, the world size it expects."""

    done: int = 0
    last_time: float = 0.0
    expected_world: int | None = None


def parse_steps(text: str) -> tuple[str, ...]:
    steps = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in steps if s not in STEPS]
    if not steps or bad:
        raise ValueError(f"--steps wants a comma list of {'/'.join(STEPS)}, got {text!r}")
    return steps


def world_sizes(records: list[MetricsRecord], events: list[Record]) -> list[tuple[float, int]]:
    """(time, world size) at which the job was seen training: rank 0's metrics records, and
    the driver's ``progress`` events after a ``reset`` (the size of that reset)."""
    seen = [(r.time, r.world_size) for r in records]
    size = None
    for e in events:
        if e.kind == Kind.RESET:
            size = e.detail.get("world_size")
        elif e.kind == Kind.PROGRESS and isinstance(size, int):
            seen.append((e.time, size))
    return sorted(seen)


def next_step(steps: tuple[str, ...], progress: Progress, records: list[MetricsRecord],
              events: list[Record] | None = None, wait_for_start: bool = False) -> str | None:
    """The step due now, or None (all done, or waiting for the previous one to take effect)."""
    if progress.done >= len(steps):
        return None
    if progress.done == 0:
        started = any(e.kind == Kind.WORKER_START for e in events or [])
        return steps[0] if started or not wait_for_start else None
    return steps[progress.done] if took_effect(progress, records, events or []) else None


def took_effect(progress: Progress, records: list[MetricsRecord], events: list[Record] | None = None) -> bool:
    """True once the job was seen training at the expected world size after the last step."""
    after = [size for when, size in world_sizes(records, events or []) if when > progress.last_time]
    return bool(after) and after[-1] == progress.expected_world


def after_step(step: str, progress: Progress, records: list[MetricsRecord], now: float,
               events: list[Record] | None = None, start_world: int | None = None) -> Progress:
    """The progress once ``step`` has run at ``now``."""
    seen = world_sizes(records, events or [])
    resets = [e.detail["world_size"] for e in events or []
              if e.kind == Kind.RESET and isinstance(e.detail.get("world_size"), int)]
    base = progress.expected_world if progress.expected_world is not None else (
        seen[-1][1] if seen else resets[-1] if resets else (start_world or 0))
    return Progress(done=progress.done + 1, last_time=now,
                    expected_world=base + (1 if step == "add" else -1))


def _act(step: str, state_dir: str, delete_pod: str) -> str:
    if step == "add":
        argv = local_cluster_argv("add-pod", "--state-dir", state_dir)
    elif step == "kill":
        argv = local_cluster_argv("delete-pod", delete_pod, "--grace", "0", "--state-dir", state_dir)
    else:
        argv = local_cluster_argv("delete-pod", delete_pod, "--state-dir", state_dir)
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise RuntimeError(f"local-cluster {argv[3]} failed: {lines[-1] if lines else proc.returncode}")
    return (proc.stdout.strip().splitlines() or [""])[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localcluster.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--state-dir", required=True, help="the local cluster's state directory")
    p.add_argument("--metrics-file", required=True, help="rank 0's JSON-lines metrics file")
    p.add_argument("--steps", default="add,kill,add", help="comma list of add/delete/kill (default %(default)s)")
    p.add_argument("--events-file", default=None,
                   help="the Horovod driver's event log (elastic-run --events-file): the first step "
                        "runs once a worker was started; later steps also see the driver's resets")
    p.add_argument("--start-world", type=int, default=None,
                   help="the world size the job starts with (default: the first size seen, else the "
                        "cluster's Ready pods when the schedule starts, one slot each)")
    p.add_argument("--delete-pod", default="worker-1",
                   help="the pod a delete or kill step removes (default %(default)s)")
    p.add_argument("--hold-file", default=None,
                   help="a file that exists until the last step took effect (the training's --debug-hold-file)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between looks at the metrics")
    args = p.parse_args(argv)
    try:
        steps = parse_steps(args.steps)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.hold_file:
        open(args.hold_file, "a").close()
    try:
        return _run(args, steps)
    finally:
        if args.hold_file:
            try:
                os.unlink(args.hold_file)
            except FileNotFoundError:
                pass


def ready_pods(state_dir: str) -> int:
    """How many of the cluster's pods are Ready now (``local-cluster status --json``); 0 if unknown."""
    proc = subprocess.run(local_cluster_argv("status", "--json", "--state-dir", state_dir),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    try:
        pods = json.loads(proc.stdout).get("pods", []) if proc.returncode == 0 else []
    except (ValueError, AttributeError):
        return 0
    return sum(1 for pod in pods if isinstance(pod, dict) and pod.get("ready") is True)


def _run(args: argparse.Namespace, steps: tuple[str, ...]) -> int:
    progress, deadline = Progress(), time.monotonic() + args.timeout
    # a first step that comes before any world size is seen counts from the pods there are
    start_world = args.start_world if args.start_world is not None else ready_pods(args.state_dir)
    while progress.done < len(steps):
        if time.monotonic() > deadline:
            print(f"error: chaos: step {progress.done + 1} ({steps[progress.done]}) not due after "
                  f"{args.timeout:.0f}s (waiting for world size {progress.expected_world})", file=sys.stderr)
            return EXIT_FAILURE
        records = read_metrics(args.metrics_file)
        events = read_records(args.events_file)
        step = next_step(steps, progress, records, events, wait_for_start=bool(args.events_file))
        if step is None:
            time.sleep(args.interval)
            continue
        now = time.time()
        try:
            out = _act(step, args.state_dir, args.delete_pod)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"error: chaos: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        progress = after_step(step, progress, records, now, events, start_world)
        what = {"delete": f"deleted {args.delete_pod}", "kill": f"killed {args.delete_pod} (grace 0)",
                "add": f"added a pod {out}".rstrip()}[step]
        print(f"chaos: step {progress.done}/{len(steps)}: {what}; expecting world size "
              f"{progress.expected_world}", file=sys.stderr, flush=True)
    while not took_effect(progress, read_metrics(args.metrics_file), read_records(args.events_file)):
        if time.monotonic() > deadline:
            print(f"error: chaos: world size {progress.expected_world} not seen after "
                  f"{args.timeout:.0f}s", file=sys.stderr)
            return EXIT_FAILURE
        time.sleep(args.interval)
    print(f"chaos: done, the training runs at world size {progress.expected_world}", file=sys.stderr, flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
