"""The push section of scripts/benchmarks/bench-discovery: how soon and how cheaply Horovod's elastic driver
holds a host change, push discovery (elastic.driver.push.DaemonDiscovery, what ``elastic-run``
gives the driver) beside script mode (``--host-discovery-script discover-hosts``: Horovod runs
it through ``safe_shell_exec`` once a second).

Both modes drive a real ``horovod.runner.elastic.driver.ElasticDriver`` (its discovery thread
and HostManager; no workers). Each sample flips one pod Ready <-> NotReady through the API;

- *served*: the moment the daemon serves the new table, seen by an independent long-poll
  reader of ``/hosts?wait=GEN`` in this process (it is answered when the daemon publishes);
- *held*: the moment the driver's ``HostManager.update_available_hosts()`` returns with the
  new host set (the driver's own state, which it then passes to its workers);
- CPU: push mode, the CPU time of the long-poll thread plus the driver's discovery thread
  (``pthread_getcpuclockid``) over all samples, per change and per HTTP answer; script mode,
  ``find_available_hosts_and_slots`` called directly, this thread's CPU plus its children's
  (the ``safe_shell_exec`` middleman and discover-hosts), per call -- the issue's method.

``measure(api, daemon_url, discover_hosts, samples)`` returns rows for the bench table:
(metric, push, script mode, ratio, goal). Blocks for about ``samples`` x 1.3 s.
"""
from __future__ import annotations

import http.client
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from elastic.driver.push import DaemonDiscovery, parse_hosts
from shared import discovery_wire as wire
from shared.worker import Worker

POD, IP = "push-0", "10.202.0.1"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds (user+sys) of a running thread of this process."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


class Served:
    """A thread long-polling ``/hosts?wait=GEN`` on its own connection: (time, hosts) per table."""

    def __init__(self, url: str) -> None:
        host, port = url[len("http://"):].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=40)
        self.tables: list[tuple[float, dict[str, int]]] = []
        self._worker = Worker(self._run, "served")

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        """Stop asking; the long poll in flight (at most 5 s) is not waited for."""
        self._worker.stop(timeout=0)

    def _run(self) -> None:
        generation = -1
        while not self._worker.stopping.is_set():
            try:
                self.conn.request("GET", f"/hosts?wait={generation}&timeout=5")
                resp = self.conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self._worker.stopping.wait(0.05)
                continue
            now = time.perf_counter()
            gen = resp.getheader(wire.GENERATION, "")
            if resp.status == 200 and gen.isdigit() and int(gen) != generation:
                generation = int(gen)
                self.tables.append((now, parse_hosts(body.decode("ascii"), 1)))


class Held:
    """Wraps a driver's HostManager.update_available_hosts: (time, hosts) after each call."""

    def __init__(self, host_manager) -> None:
        self.calls: list[tuple[float, dict[str, int]]] = []
        original = host_manager.update_available_hosts

        def update_available_hosts():
            res = original()
            self.calls.append((time.perf_counter(), dict(host_manager.current_hosts.host_slots)))
            return res

        host_manager.update_available_hosts = update_available_hosts


class NoRendezvous:
    def stop(self) -> None:
        pass


def first_after(records: list[tuple[float, dict[str, int]]], t0: float, present: bool) -> float | None:
    for t, hosts in list(records):
        if t >= t0 and (IP in hosts) == present:
            return t
    return None


def wait_until(pred: Callable[[], float | None], timeout: float, what: str) -> float:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        got = pred()
        if got is not None:
            return got
        time.sleep(0.002)
    raise SystemExit(f"bench-discovery push: timed out after {timeout:.0f}s waiting for {what}")


def run_driver(api, served: Served, discovery, samples: int, threads: Callable[[], list[threading.Thread]]
               ) -> tuple[list[float], float]:
    """Flip the pod ``samples`` times under a real ElasticDriver -> (served->held latencies, CPU s)."""
    from horovod.runner.elastic.driver import ElasticDriver

    driver = ElasticDriver(NoRendezvous(), discovery, min_num_proc=1, max_num_proc=64, timeout=600)
    held = Held(driver._host_manager)
    lat: list[float] = []
    try:
        wait_until(lambda: held.calls[-1][0] if held.calls else None, 60, "the driver's first discovery")
        watched = threads() + [driver._discovery_thread]
        cpu0 = sum(thread_cpu(t) for t in watched)
        present = IP in held.calls[-1][1]
        for _ in range(samples):
            present = not present
            t0 = time.perf_counter()
            api.set_status(POD, IP, present)
            t_served = wait_until(partial(first_after, served.tables, t0, present), 30, "the daemon to serve it")
            t_held = wait_until(partial(first_after, held.calls, t0, present), 30, "the driver to hold it")
            lat.append(t_held - t_served)
        cpu = sum(thread_cpu(t) for t in watched) - cpu0
    finally:
        driver.stop()
    return lat, cpu


def script_poll_cost(discover_hosts: Path, calls: int) -> tuple[list[float], list[float]]:
    """Horovod's script mode, one poll at a time: (wall s, CPU s incl. children) per call."""
    from horovod.runner.elastic.discovery import HostDiscoveryScript

    script = HostDiscoveryScript(str(discover_hosts), 1)
    walls, cpus = [], []
    for _ in range(calls):
        c0 = time.thread_time() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime \
            + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime
        t0 = time.perf_counter()
        script.find_available_hosts_and_slots()
        walls.append(time.perf_counter() - t0)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(time.thread_time() + ru.ru_utime + ru.ru_stime - c0)
    return walls, cpus


def measure(api, daemon_url: str, discover_hosts: Path, samples: int) -> list[tuple[str, str, str, str, str]]:
    """The push section's rows (see the module docstring). Leaves the env as it found it."""
    from horovod.runner.elastic.discovery import HostManager

    patched = hasattr(HostManager, "wait_for_change")
    api.fake_pod(POD, IP)
    served = Served(daemon_url)
    served.start()
    saved = os.environ.get("DISCOVERY_URL")
    os.environ["DISCOVERY_URL"] = daemon_url  # what discover-hosts reads in script mode
    try:
        push = DaemonDiscovery(daemon_url, 1)
        push.start()
        push_thread = next(t for t in threading.enumerate() if t.name == "push-discovery")
        polls0 = push.polls
        push_lat, push_cpu = run_driver(api, served, push, samples, lambda: [push_thread])
        polls = push.polls - polls0
        push.stop()

        from horovod.runner.elastic.discovery import HostDiscoveryScript
        script_lat, _ = run_driver(api, served, HostDiscoveryScript(str(discover_hosts), 1), samples, list)
        walls, cpus = script_poll_cost(discover_hosts, max(10, samples // 2))
    finally:
        served.stop()
        if saved is None:
            os.environ.pop("DISCOVERY_URL", None)
        else:
            os.environ["DISCOVERY_URL"] = saved
        api.delete(POD, 0)

    def ratio(a: float, b: float) -> str:
        return f"{b / a:.0f}x" if a > 0 else ""

    note = "" if patched else " (stock Horovod: no wake-up, polled every 1 s)"
    per_change, per_poll = push_cpu / samples, push_cpu / max(1, polls)
    return [
        (f"push (baseline column: script mode): daemon serves a change -> driver holds it, p50{note}",
         ms(pct(push_lat, 50)),
         ms(pct(script_lat, 50)), ratio(pct(push_lat, 50), pct(script_lat, 50)), ""),
        (f"push: ... p99 ({samples} changes)", ms(pct(push_lat, 99)), ms(pct(script_lat, 99)),
         ratio(pct(push_lat, 99), pct(script_lat, 99)), "p99 < 100 ms"),
        ("push: driver CPU per change (long-poll + driver threads)", ms(per_change),
         ms(statistics.median(cpus)) + " per poll, 1 poll/s", ratio(per_change, statistics.median(cpus)),
         "< 2 ms"),
        (f"push: driver CPU per HTTP answer ({polls} answers)", ms(per_poll), "", "", "< 2 ms"),
        ("push: script mode, one poll (safe_shell_exec discover-hosts), wall median / p90", "",
         f"{ms(statistics.median(walls))} / {ms(pct(walls, 90))}", "", "(issue: 154-184 ms)"),
        ("push: script mode, one poll, CPU incl. children, median", "", ms(statistics.median(cpus)), "",
         "(issue: ~160 ms)"),
    ]
