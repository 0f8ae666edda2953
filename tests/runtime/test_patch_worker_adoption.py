"""0112: what a driver that adopted a running world needs of its workers: their registration
again, and where each is in its world.

A worker registers its notification service once, at ``hvd.elastic.run``, with the driver that
started it, and only it knows the ranks Gloo gave it. A launcher that adopts the running world
answers at the same rendezvous endpoint with a driver that saw neither. The harness is
test_patch_units.py's: a real driver (the one the venv's horovodrun runs) with its rendezvous
server, in this process; the worker a thread running a real ``WorkerNotificationManager``
(whose service outlives its first driver as a training process outlives the launcher that
started it), or a process running horovod.torch.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

from horovod.runner.elastic.worker import HostUpdateResult
from horovod.runner.http.http_server import RendezvousHTTPServer, RendezvousServer
from horovod.runner.util.threads import in_thread

from tests.waiting import wait_for

KEY = ("host-1", 0)
# generous: the old driver's pings must stop for PIGGYBACK_WINDOW_SECS (6 s) before the worker
# reports over HTTP, every PROGRESS_REPORT_SECS (3 s); the machine is shared. Not a timing check.
REGISTER_DEADLINE = 90.0
NOTIFY_DEADLINE = 30.0
START_DEADLINE = 180.0  # a process importing torch and horovod.torch: 5 s idle, far more loaded
END_DEADLINE = 30.0

# A training process as hvd.elastic.run makes it: Horovod initialized (one rank, no horovodrun
# needed), the decorator applied, its notification service registered with the driver at
# argv's rendezvous as host-1's slot 0, three commits; it lives until its stdin closes.
TORCH_WORKER = textwrap.dedent("""
    import sys
    import horovod.torch as hvd
    from horovod.common.elastic import notification_manager

    addr, port, nic = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    hvd.init()
    hvd.elastic.run(lambda state: None)
    notification_manager.init(rendezvous_addr=addr, rendezvous_port=port, nic=nic,
                              hostname="host-1", local_rank=0)
    for _ in range(3):
        notification_manager.report_progress()
    sys.stdin.read()
""")


class SamePortRendezvous(RendezvousServer):
    """Horovod's rendezvous server on a port given, where an adopting launcher's listens (the
    job's fixed rendezvous endpoint), instead of a free one."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self._port = port

    def start(self, handler_cls: Any) -> int:
        self._httpd = RendezvousHTTPServer(("", self._port), handler_cls, self._verbose)
        self._listen_thread = in_thread(target=self._httpd.serve_forever)
        return self._port


class HostChanges:
    """A listener of a worker's notification manager: the host changes it was told of."""

    def __init__(self) -> None:
        self.heard: list[tuple[float, HostUpdateResult]] = []
        self._lock = threading.Lock()

    def on_hosts_updated(self, timestamp: float, update_res: HostUpdateResult) -> None:
        with self._lock:
            self.heard.append((timestamp, update_res))

    def told(self, timestamp: float) -> bool:
        with self._lock:
            return any(t == timestamp for t, _ in self.heard)


def test_a_worker_registers_again_with_a_new_driver_at_its_rendezvous(jobs):
    """0112: the worker's first driver and its rendezvous server go (a lost launcher); a new
    driver answers at the same port and never saw the worker's registration. The worker, no
    longer pinged, reports its commits over HTTP, is told the driver does not hold its service,
    and registers again: the new driver then holds it, and a host change it sends through it
    reaches the worker. Without the patch the new driver never learns where the worker is."""
    first = jobs({"host-1": 1}, min_np=1, max_np=1)
    first.start()
    first.wait_ready(KEY)
    manager = first.managers[KEY]
    changes = HostChanges()
    manager.register_listener(changes)
    manager.report_progress()  # the worker commits: its progress sender runs from now on

    first.driver.stop()
    first.rendezvous.stop()  # the launcher is gone; the worker's service stays up

    adopting = jobs({"host-1": 1}, min_np=1, max_np=1, rendezvous=SamePortRendezvous(first.port))
    assert adopting.port == first.port
    assert not adopting.driver.knows_worker_server(*KEY)

    def registered_again() -> bool:
        manager.report_progress()  # the training goes on committing
        return adopting.driver.knows_worker_server(*KEY)

    wait_for(registered_again, REGISTER_DEADLINE, "the worker registered with the new driver")

    timestamp = 12345.0
    client = adopting.driver._worker_clients[KEY]  # what the worker's registration gave the driver
    client.notify_hosts_updated(timestamp, HostUpdateResult.added)
    wait_for(lambda: changes.told(timestamp), NOTIFY_DEADLINE, "the new driver's host change reached the worker")


def test_a_worker_tells_a_driver_its_ranks_commits_and_resets(jobs):
    """0112: a horovod.torch process in an elastic run answers a WorkerWorldRequest with its
    ranks in the world its Horovod is initialized in (rank, size, local rank and size, cross
    rank and size), its commit count and the resets it has begun: what a driver that adopted
    the world learns it from (which process is rank 0, the coordinator). Without the patch the
    service has no such answer."""
    job = jobs({"host-1": 1}, min_np=1, max_np=1)  # a driver and its rendezvous; nothing spawned
    worker = subprocess.Popen([sys.executable, "-c", TORCH_WORKER, job.addr, str(job.port), job.nic],
                              stdin=subprocess.PIPE)
    try:
        wait_for(lambda: worker.poll() is not None or job.driver.knows_worker_server(*KEY), START_DEADLINE,
                 "the worker registered")
        assert worker.poll() is None, f"the worker ended with {worker.returncode}"
        client = job.driver._worker_clients[KEY]
        # the registration comes before the worker's three commits: wait for them, not race
        answer = wait_for(lambda: (a := client.worker_world()).commits == 3 and a, START_DEADLINE,
                          "the worker's answer to name its three commits")
        assert answer.ranks == (0, 1, 0, 1, 0, 1)
        assert answer.resets == 0
    finally:
        worker.stdin.close()
        try:
            worker.wait(END_DEADLINE)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
