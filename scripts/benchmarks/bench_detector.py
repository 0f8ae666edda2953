#!/usr/bin/env python3
"""bench-detector: what the elastic driver's failure detector costs as the job grows.

    scripts/benchmarks/bench_detector.py [--workers 64,256] [--seconds 30] [--baseline DIR] [--drivers fork,project]

The real ``ElasticDriver`` (its ``RendezvousServer``, ``FixedHosts`` discovery, liveness pings,
notification clients, event log) runs in this process over N one-slot hosts; the N workers are
simulated in one child process: per worker a real ``WorkerNotificationManager`` whose
notification service answers the driver's pings and whose progress reporter tells the driver
a new commit count every second (as ``hvd.elastic.run``'s ``state.commit()`` does), nothing
else (no training, no Gloo). Once every service has registered and a warm-up has passed, the
driver process's CPU time (user + system, ``getrusage``) and the growth of its events file
(``HOROVOD_ELASTIC_EVENTS_FILE``) are measured over --seconds (30):

- driver CPU, ms per worker per second (goal < 0.2);
- events file, KB per worker per hour.

``--drivers``: which drivers run, side by side: ``fork`` (the fork's ``ElasticDriver``, with each
worker's lease wrapper opening a new connection every second, as before the run id) and
``project`` (``elastic.driver.elastic_driver``, what elastic-run runs, its lease answers
installed, each wrapper renewing on one kept connection, ``elastic.worker.lease.Renewer``).
``--baseline DIR``: a directory holding a ``horovod`` package of another build (e.g. eh3: the
installed package with its ``runner/`` files as eh3 had them) run the same way, side by side.
Each figure is one run on a shared machine: read them as orders of magnitude, not to 5 %.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
sys.path.insert(0, ROOT)

from shared.exitcodes import EXIT_OK  # noqa: E402

WARMUP_S = 5.0
REGISTER_DEADLINE_S = 300.0

CHILD = r"""
import sys, threading, time
from horovod.runner.elastic.worker import WorkerNotificationManager
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
managers = []
for i in range(n):
    manager = WorkerNotificationManager()
    manager.init(rendezvous_addr=addr, rendezvous_port=port, nic='lo', hostname='host-%03d' % i, local_rank=0)
    managers.append(manager)
lease = sys.argv[4]
if lease == 'kept':
    from elastic.worker.lease import Renewer
    renewers = [Renewer(addr, port, run_id='bench').start() for _ in range(n)]
elif lease == 'new':
    import http.client
    def renew():
        while True:
            conn = http.client.HTTPConnection(addr, port, timeout=8)
            try:
                conn.request('GET', '/elastic-run-lease/ping')
                conn.getresponse().read()
            except Exception:
                pass
            finally:
                conn.close()
            time.sleep(1.0)
    for _ in range(n):
        threading.Thread(target=renew, daemon=True).start()
print('registered', flush=True)
while True:
    for manager in managers:
        manager.report_progress()
    time.sleep(1.0)
"""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(workers: int, seconds: float, which: str) -> dict:
    """One run in this process (the driver: ``fork`` or ``project``) with a child simulating
    the workers and their lease wrappers."""
    from horovod.runner.elastic import driver as fork_driver
    from horovod.runner.elastic.discovery import FixedHosts
    from horovod.runner.elastic.rendezvous import create_rendezvous_handler
    from horovod.runner.http.http_server import RendezvousServer
    driver_class = fork_driver.ElasticDriver
    if which == "project":
        from elastic.driver import elastic_driver
        elastic_driver.install("bench")
        driver_class = elastic_driver.ElasticDriver

    events = Path(os.environ["HOROVOD_ELASTIC_EVENTS_FILE"])
    hosts = {f"host-{i:03d}": 1 for i in range(workers)}
    rendezvous = RendezvousServer()
    driver = driver_class(rendezvous, FixedHosts(hosts), min_num_proc=workers, max_num_proc=workers)
    port = rendezvous.start(create_rendezvous_handler(driver))
    stop = threading.Event()

    def worker(slot_info, events_):
        stop.wait()  # a process the driver started (its own relay's cost is not the detector's)
        return 0, time.time()

    child = None
    try:
        driver.wait_for_available_slots(workers)
        driver.start(workers, worker)
        lease = "kept" if which == "project" else "new"
        child = subprocess.Popen([sys.executable, "-c", CHILD, "127.0.0.1", str(port), str(workers), lease],
                                 stdout=subprocess.PIPE, text=True, cwd=ROOT)
        deadline = time.monotonic() + REGISTER_DEADLINE_S
        while sum(1 for w in list(driver._workers.values()) if w.client is not None) < workers:
            if time.monotonic() > deadline or child.poll() is not None:
                raise SystemExit(f"bench-detector: the {workers} simulated workers did not register")
            time.sleep(0.2)
        time.sleep(WARMUP_S)
        cpu0, size0, t0 = cpu_seconds(), events.stat().st_size, time.monotonic()
        time.sleep(seconds)
        cpu1, size1, t1 = cpu_seconds(), events.stat().st_size, time.monotonic()
        lost = sum(1 for w in list(driver._workers.values()) if w.lost is not None)
        if lost:
            print(f"bench-detector: {lost} of the {workers} simulated workers lost (the machine too loaded?)",
                  file=sys.stderr)
        kinds: dict[str, int] = {}
        for line in events.read_text().splitlines():
            kind = json.loads(line)["kind"]
            kinds[kind] = kinds.get(kind, 0) + 1
    finally:
        stop.set()
        if child is not None:
            child.kill()
            child.wait()
        driver.stop()
        rendezvous.stop()
    elapsed = t1 - t0
    return {"workers": workers, "cpu_ms_per_worker_s": (cpu1 - cpu0) * 1000.0 / workers / elapsed,
            "events_kb_per_worker_h": (size1 - size0) / 1024.0 / workers / elapsed * 3600.0,
            "lost": lost, "kinds": kinds}


def run(workers: int, seconds: float, pythonpath: str | None, which: str) -> dict:
    """measure() in a fresh interpreter (with pythonpath first on its path: another build)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        env["HOROVOD_ELASTIC_EVENTS_FILE"] = str(Path(tmp) / "events.jsonl")
        out = subprocess.run([sys.executable, __file__, "--one", str(workers), "--seconds", str(seconds),
                              "--drivers", which],
                             env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"bench-detector: the run with {workers} workers failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="64,256", help="comma list of simulated world sizes")
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window per run")
    parser.add_argument("--baseline", help="a directory with another build's horovod package (e.g. eh3)")
    parser.add_argument("--drivers", default="fork,project", help="comma list: fork, project")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    drivers = [d for d in args.drivers.split(",") if d]
    if not drivers or any(d not in ("fork", "project") for d in drivers):
        parser.error(f"--drivers {args.drivers!r}: expected a comma list of fork, project")
    if args.one:
        print(json.dumps(measure(args.one, args.seconds, drivers[0])))
        return EXIT_OK
    try:
        sizes = [int(n) for n in args.workers.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--workers {args.workers!r}: expected a comma list of numbers")
    builds = [("this build", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    print("| workers | build | driver (lease) | driver CPU ms/worker/s (goal < 0.2) | events KB/worker/hour | lost |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        for name, path in builds:
            for which in drivers:
                r = run(n, args.seconds, path, which)
                lease = "kept connection" if which == "project" else "a connection each second"
                print(f"| {n} | {name} | {which} ({lease}) | {r['cpu_ms_per_worker_s']:.3f} | "
                      f"{r['events_kb_per_worker_h']:.1f} | {r['lost']} |", flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
