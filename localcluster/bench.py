"""Benchmark of the local cluster: ``python -m localcluster.bench [--sizes 100,1000] [--local-pods 4]``.

Prints one table: cluster start, pod create -> Ready, SSH round trip, graceful delete -> gone,
and LIST latency at several cluster sizes through this package's stdlib client, the official
``kubernetes`` client and ``kubectl get pods -o json`` (the baseline; ratio = time / kubectl's),
plus watch delivery latency (create -> ADDED seen by a watcher). Pods for the LIST sizes are bound
to node ``remote`` (stored, not run). Runs its own cluster in a temporary state directory.
"""
from __future__ import annotations

import argparse
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from shared.exitcodes import EXIT_OK

from . import control
from .statefiles import StatePaths
from .testing import ClusterHandle


def _timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m localcluster.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,1000", help="comma-separated pod counts for LIST (default %(default)s)")
    p.add_argument("--local-pods", type=int, default=4, help="sshd pods to start (default %(default)s)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="lc-bench-") as tmp:
        paths = StatePaths(Path(tmp) / "c")
        t = time.perf_counter()
        state, _ = control.start(paths)
        rows.append(("cluster start (API answers)", f"{time.perf_counter() - t:.2f} s", ""))
        try:
            lc = ClusterHandle(paths, state)
            t = time.perf_counter()
            names = [f"bench-{i}" for i in range(args.local_pods)]
            for n in names:
                lc.create_pod(n)
            control.wait_ready(state, names, 120)
            rows.append((f"{args.local_pods} pods create -> all Ready", f"{time.perf_counter() - t:.2f} s", ""))
            ssh = _timed(lambda: lc.ssh(names[0], "true"), args.repeat)
            rows.append(("ssh pod true (round trip)", f"{ssh * 1000:.0f} ms", ""))
            t = time.perf_counter()
            lc.delete_pod(names[-1], grace_seconds=30)
            lc.wait_gone(names[-1], 60)
            rows.append(("graceful delete -> gone (sshd only)", f"{(time.perf_counter() - t) * 1000:.0f} ms", ""))

            # watch delivery latency
            api = lc.core_v1()
            from kubernetes import watch
            seen: queue.Queue = queue.Queue()
            rv = api.list_namespaced_pod("lat").metadata.resource_version
            w = watch.Watch()

            def follow():
                for count, _ev in enumerate(w.stream(api.list_namespaced_pod, "lat", resource_version=rv,
                                                     timeout_seconds=120), 1):
                    seen.put(time.perf_counter())
                    if count >= 20:
                        return
            th = threading.Thread(target=follow, daemon=True)
            th.start()
            lat = []
            for i in range(20):
                t = time.perf_counter()
                lc.create_pod(f"lat-{i}", namespace="lat", node_name="remote")
                lat.append(seen.get(timeout=30) - t)
            th.join(30)
            rows.append(("watch delivery (create -> ADDED seen)", f"{statistics.median(lat) * 1000:.1f} ms",
                         "median of 20"))

            made = 0
            for size in sizes:
                while made < size:
                    lc.create_pod(f"p-{made}", namespace="big", node_name="remote")
                    made += 1
                kubectl = _timed(lambda: subprocess.run(
                    ["kubectl", "--kubeconfig", str(lc.kubeconfig), "get", "pods", "-n", "big", "-o", "json"],
                    capture_output=True, check=True), args.repeat)
                stdlib = _timed(lambda: lc.client.list_pods("big"), args.repeat)
                official = _timed(lambda: api.list_namespaced_pod("big"), args.repeat)
                rows.append((f"LIST {size} pods: kubectl -o json (baseline)", f"{kubectl * 1000:.0f} ms", "1.00"))
                rows.append((f"LIST {size} pods: stdlib client", f"{stdlib * 1000:.0f} ms", f"{stdlib / kubectl:.2f}"))
                rows.append((f"LIST {size} pods: official client", f"{official * 1000:.0f} ms",
                             f"{official / kubectl:.2f}"))
        finally:
            control.stop(paths)
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>10}  ratio")
    for name, value, ratio in rows:
        print(f"{name:<{width}}  {value:>10}  {ratio}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
