"""The kubelet: each pod of node ``local`` becomes an sshd host on this machine.

``Kubelet(service, paths, prefix, ssh_port, isolation)``; ``await start()`` / ``await stop()``.
It follows the store's events and, for every pod whose ``spec.nodeName`` is empty (it binds it
to ``local``) or ``local`` -- pods of other nodes are left alone:

0. with ``capacity`` N (0: no limit), binds a pod only while fewer than N pods of the node
   hold a place (bound, not Succeeded or Failed; a terminating pod holds its place until it
   is gone); the rest stay Pending without a node, as on a full pool, and are bound oldest
   first (creation time, then name) as places free up: what a capped GPU pool does;

1. gives it the next address of its ``127.A.B.0/24`` pool, a directory ``DIR/pods/<pod>/`` with
   ``data/``, a host key and an ``sshd_config``; a pod whose ``/data`` volume is a ``hostPath``
   gets ``DIR/node/<path>`` instead, kept after the pod (``localcluster.volumes``);
2. starts ``/usr/sbin/sshd -D`` on ``ip:ssh_port``. With ``isolation="namespaces"`` (root) it runs
   as pid 1 of new pid, mount and UTS namespaces (``unshare``): the hostname is the pod name,
   ``DIR/pods/<pod>/data`` is bind-mounted on ``/data``, ``/etc/hosts`` maps the pod name to
   its IP (as in Kubernetes), the login user's shell start-up files (``SHELL_STARTUP_FILES``)
   read as empty (a container has its own: a host ``~/.bashrc`` that runs ``pyenv init`` is
   not the pod's; the rest of the home is shared), and "every process of the pod" is exactly
   the pid namespace. With ``isolation="none"`` (the non-root fallback) sshd runs directly: no
   own hostname or ``/data`` (use ``DIR/pods/<pod>/data``); sshd runs below a child subreaper
   (``localcluster.podinit``) and the pod's processes are that init's descendants;
3. reports ``Running``, ``Ready=True`` and ``podIP`` once sshd answers with its banner, or
   ``Failed`` if sshd exits on its own;
4. on deletion (``deletionTimestamp``) sends SIGTERM to every process of the pod but its init,
   waits until they are gone or the grace period ends, then stops init (SIGTERM, SIGKILL; the
   kernel kills whatever is left in the namespace), frees the address and the directory, and
   removes the object (``finish_deletion``). A pod removed outright is killed at once.

Every sshd is started under ``setpriv --pdeathsig KILL``, so if this process dies, its pods die.

With ``runtime="containers"`` (``image`` given) each pod is instead a container of the worker
image (``localcluster.containers``; ``ContainerPodRuntime``): step 1 gives it its address and
``data/``, step 2 runs the image's own entrypoint and sshd, step 4 is the engine's stop with the
remaining grace period. The kubelet removes its cluster's leftover containers when it starts
and stops (a killed cluster process cannot stop them itself).
"""
from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timezone

from . import containers, pods, procs, sshd, volumes
from .addresses import AddressPool
from .core import PodService
from .errors import ApiError, KubeletError
from .statefiles import StatePaths, write_atomic
from .store import Event

log = logging.getLogger("localcluster.kubelet")

NODE = "local"
HOST_IP = "127.0.0.1"
# a pod runs none of the host user's shell start-up files (a ``~/.bashrc`` that runs ``pyenv
# init`` costs seconds per ssh command under load, and hangs them on a stale pyenv lock); the
# rest of the home stays shared, since the host's Python (a venv's base) may live there
SHELL_STARTUP_FILES = (".bashrc", ".bash_profile", ".bash_login", ".profile")
_INIT_SCRIPT = ('set -e; hostname "$1"; mount --bind "$2" /data; mount --bind "$5" /etc/hosts; '
                'for f in ' + " ".join(SHELL_STARTUP_FILES) + '; do '
                'if [ -f "$6/$f" ]; then mount --bind /dev/null "$6/$f"; fi; done; '
                'exec "$4" -D -e -f "$3"')


def login_home() -> str:
    """The home directory of the user the pods' sshd logs in (this process's user)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir or "/"
    except KeyError:
        return "/"


def hosts_file(ip: str, hostname: str) -> str:
    """The pod's /etc/hosts, as the kubelet writes it: localhost plus ``ip hostname``."""
    return ("# Kubernetes-managed hosts file (localcluster).\n127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::1\tip6-allnodes\n"
            f"fe00::2\tip6-allrouters\n{ip}\t{hostname}\n")


def managed(pod: dict) -> bool:
    """True for pods this kubelet runs: ``spec.nodeName`` empty or ``local``."""
    return (pod.get("spec") or {}).get("nodeName") in (None, "", NODE)


def ensure_data_mountpoint() -> None:
    """``/data`` must exist in the root mount namespace for the bind mount; create it if missing."""
    try:
        os.makedirs("/data", exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError as exc:
        raise KubeletError(f"cannot create /data or /run/sshd (needed by isolated pods): {exc}") from exc


class PodRuntime:
    """One pod incarnation (one uid) on this machine; its lifecycle is the ``run()`` task."""

    def __init__(self, kubelet: Kubelet, pod: dict) -> None:
        self.kubelet = kubelet
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = kubelet.paths.pod_dir(self.namespace, self.name)
        self.pod = pod  # its spec: the volume on /data (localcluster.volumes)
        self.ip: str | None = None
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.ns: str | None = None
        # an open handle on the pod's pid namespace, held until the pod is cleaned up: the
        # kernel reuses a freed namespace's number at once, and ``ns`` must never name the
        # namespace of a newer pod (its processes would be signalled as this pod's)
        self.ns_fd: int | None = None
        self.kill_at: float | None = None  # loop time at which to stop waiting for SIGTERM
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        # the previous incarnation of a pod of the same name, still being cleaned up (it owns
        # DIR/pods/<pod>/ until it is done)
        self.previous: asyncio.Task | None = None

    # -- requests from the kubelet ---------------------------------------------------------
    def terminate(self, grace_seconds: float) -> None:
        """Begin (or hasten) graceful termination: SIGKILL after ``grace_seconds``."""
        at = asyncio.get_running_loop().time() + max(0.0, grace_seconds)
        if self.kill_at is None or at < self.kill_at:
            self.kill_at = at
        self.wake.set()

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self) -> None:
        k = self.kubelet
        try:
            if self.previous is not None and not self.previous.done():
                await asyncio.wait([self.previous])
            proc, ip = self._spawn()
            await self._serve(proc, ip)
        except KubeletError as exc:
            log.error("pod %s/%s: %s", self.namespace, self.name, exc)
            self._report_failed(str(exc), None)
            if self.kill_at is None:
                await self.wake.wait()
        except Exception as exc:  # keep the kubelet alive whatever one pod does
            log.exception("pod %s/%s failed", self.namespace, self.name)
            self._report_failed(f"internal error in the kubelet: {exc!r}", None)
        finally:
            await self._stop()
            if self.ns_fd is not None:
                os.close(self.ns_fd)
                self.ns_fd = None
            if self.ip:
                k.pool.release(self.ip)
            shutil.rmtree(self.dir, ignore_errors=True)
            k.forget(self)
            try:
                k.service.finish_deletion(self.namespace, self.name, self.uid)
            except ApiError:
                pass

    def _spawn(self) -> tuple[subprocess.Popen, str]:
        """Start the pod's sshd; returns its process and the pod's address (also kept as
        ``proc`` and ``ip``). Raises KubeletError when it cannot start."""
        k = self.kubelet
        self.dir.mkdir(parents=True, exist_ok=True)
        data = volumes.data_source(self.pod, k.paths.node_root, self.dir)
        self.ip = ip = k.pool.allocate()
        key = self.dir / "ssh_host_ed25519_key"
        sshd.make_host_key(str(key))
        config = self.dir / "sshd_config"
        write_atomic(config, sshd.render_config(ip, k.ssh_port, str(key), str(k.paths.authorized_keys)))
        hosts = self.dir / "hosts"
        write_atomic(hosts, hosts_file(ip, self.name[:63]))
        logf = open(self.dir / "sshd.log", "ab")
        pdeath = ["setpriv", "--pdeathsig", "KILL", "--"]
        if k.isolation == "namespaces":
            cmd = pdeath + ["unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
                            "--", "/bin/sh", "-c", _INIT_SCRIPT, "pod-init", self.name[:63], str(data),
                            str(config), sshd.SSHD, str(hosts), login_home()]
        else:
            cmd = pdeath + [sys.executable, "-m", "localcluster.podinit", sshd.SSHD, "-D", "-e", "-f", str(config)]
        try:
            self.proc = proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                                start_new_session=True, close_fds=True)
        except OSError as exc:
            raise KubeletError(f"cannot start sshd: {exc}") from exc
        finally:
            logf.close()
        log.info("pod %s/%s: started sshd on %s:%d (pid %d)", self.namespace, self.name, ip,
                 k.ssh_port, proc.pid)
        return proc, ip

    def _find_init(self) -> None:
        if self.init_pid is not None or self.proc is None:
            return
        if self.kubelet.isolation == "namespaces":
            child = procs.first_child(self.proc.pid)
            held = procs.hold_namespace(child) if child else None
            if held is None:
                return
            fd, ns = held
            if ns == procs.namespace_of(os.getpid()):  # unshare has not made it yet
                os.close(fd)
                return
            self.init_pid, self.ns, self.ns_fd = child, ns, fd
        else:
            self.init_pid = self.proc.pid

    def processes(self, include_init: bool = False) -> list[int]:
        """Live processes of this pod (init only with ``include_init``)."""
        if self.init_pid is None:
            return []
        if self.ns is not None:
            found = procs.in_namespace(self.ns)
            return [p for p in found if include_init or p != self.init_pid]
        # without namespaces, init is podinit and sshd is its first child: both count as "init"
        found = procs.descendants(self.init_pid)
        sshd_pid = procs.first_child(self.init_pid)
        return [p for p in found if include_init or p != sshd_pid] + ([self.init_pid] if include_init else [])

    async def _serve(self, proc: subprocess.Popen, ip: str) -> None:
        """Report the pod Running and Ready once sshd (``proc``) answers on ``ip``; return when
        termination begins. Raises KubeletError if sshd exits on its own."""
        k = self.kubelet
        ready = False
        started = datetime.now(timezone.utc)
        while self.kill_at is None:
            self._find_init()
            code = proc.poll()
            if code is not None:
                tail = _tail(self.dir / "sshd.log")
                raise KubeletError(f"sshd exited with code {code}: {tail}")
            if not ready and await sshd.probe(ip, k.ssh_port, 1.0):
                ready = True
                self._report(lambda pod: dict(pod, status=pods.running_status(
                    pod, ip, HOST_IP, k.service.clock(), started)))
            try:
                await asyncio.wait_for(self.wake.wait(), 0.5 if ready else 0.05)
            except asyncio.TimeoutError:
                pass

    def _report(self, fn) -> None:
        try:
            pod = self.kubelet.service.get(self.namespace, self.name)
            if pod["metadata"]["uid"] == self.uid and not pod["metadata"].get("deletionTimestamp"):
                self.kubelet.service.update(self.namespace, self.name, fn)
        except ApiError as exc:
            log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)

    def _report_failed(self, message: str, code: int | None) -> None:
        self._report(lambda pod: dict(pod, status=pods.failed_status(pod, message, self.kubelet.service.clock(), code)))

    async def _stop(self) -> None:
        """SIGTERM the pod's processes, wait for them or the deadline, then stop init."""
        if self.proc is None:
            return
        loop = asyncio.get_running_loop()
        if self.kill_at is None:
            self.kill_at = loop.time()
        self._find_init()
        signalled: set[int] = set()
        while loop.time() < self.kill_at and self.proc.poll() is None:
            others = [p for p in self.processes() if p not in signalled]
            procs.signal_all(others, signal.SIGTERM)
            signalled.update(others)
            if not self.processes():
                break
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), 0.05)
            except asyncio.TimeoutError:
                pass
        if self.init_pid is not None:
            procs.signal_all([self.init_pid], signal.SIGTERM)
            end = loop.time() + 1.0
            while self.proc.poll() is None and loop.time() < end and loop.time() < self.kill_at + 1.0:
                await asyncio.sleep(0.02)
        if self.proc.poll() is None or self.processes(include_init=True):
            procs.signal_all(self.processes(include_init=True), signal.SIGKILL)
            if self.proc.poll() is None:
                self.proc.kill()
        while self.proc.poll() is None:
            await asyncio.sleep(0.02)
        # without namespaces a session may have left its sshd: make sure nothing of the pod stays
        if self.ns is not None:
            for _ in range(100):
                left = procs.in_namespace(self.ns)
                if not left:
                    break
                procs.signal_all(left, signal.SIGKILL)
                await asyncio.sleep(0.02)
        log.info("pod %s/%s: stopped", self.namespace, self.name)


class ContainerPodRuntime(PodRuntime):
    """One pod incarnation as a container of the worker image (``runtime="containers"``)."""

    def _spawn(self) -> tuple[subprocess.Popen, str]:
        """Start the pod's container; returns the engine's ``run`` process and the pod's address
        (also kept as ``proc`` and ``ip``). Raises KubeletError when it cannot start."""
        k = self.kubelet
        engine, image = k.engine_and_image()
        self.dir.mkdir(parents=True, exist_ok=True)
        data = volumes.data_source(self.pod, k.paths.node_root, self.dir)
        self.ip = ip = k.pool.allocate()
        self.container = containers.container_name(k.cluster_id, self.namespace, self.name, self.uid)
        spec = containers.ContainerSpec(
            name=self.container, image=image, hostname=self.name[:63], ip=ip, ssh_port=k.ssh_port,
            data_dir=str(data), public_key=str(k.paths.authorized_keys), cluster_id=k.cluster_id,
            shared_dirs=k.shared_dirs)
        logf = open(self.dir / "sshd.log", "ab")
        try:
            self.proc = proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--"] + containers.run_argv(engine, spec),
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True, close_fds=True)
        except OSError as exc:
            raise KubeletError(f"cannot start the container: {exc}") from exc
        finally:
            logf.close()
        log.info("pod %s/%s: started container %s (%s) on %s:%d", self.namespace, self.name, self.container,
                 image, ip, k.ssh_port)
        return proc, ip

    def _find_init(self) -> None:
        return None

    def processes(self, include_init: bool = False) -> list[int]:
        return []

    async def _stop(self) -> None:
        """The engine's stop with the remaining grace period (SIGTERM, then SIGKILL); wait for it."""
        if self.proc is None:
            return
        engine, _ = self.kubelet.engine_and_image()  # set: the container was started
        loop = asyncio.get_running_loop()
        if self.kill_at is None:
            self.kill_at = loop.time()
        grace = max(0, int(self.kill_at - loop.time() + 0.999))
        if self.proc.poll() is None:
            stopper = await asyncio.create_subprocess_exec(
                *containers.stop_argv(engine, self.container, grace),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await stopper.wait()
        end = loop.time() + 30.0
        while self.proc.poll() is None and loop.time() < end:
            await asyncio.sleep(0.05)
        if self.proc.poll() is None:  # the engine did not stop it: remove it by force
            await asyncio.to_thread(subprocess.run, [engine, "rm", "--force", "--time", "0", "--", self.container],
                                    capture_output=True, timeout=120)
            self.proc.kill()
            self.proc.wait()
        log.info("pod %s/%s: stopped (container exit code %s)", self.namespace, self.name, self.proc.returncode)


def _tail(path, limit: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "(no log)"
    return " | ".join(text.splitlines()[-3:])[-limit:] or "(no output)"


class Kubelet:
    """Runs the pods of node ``local``; ``start()`` follows the store, ``stop()`` ends every pod."""

    def __init__(self, service: PodService, paths: StatePaths, prefix: str, ssh_port: int,
                 isolation: str = "namespaces", stop_grace: float = 2.0, runtime: str = "processes",
                 image: str | None = None, shared_dirs: tuple = (), capacity: int = 0) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        if isolation not in ("namespaces", "none"):
            raise ValueError(f"isolation must be 'namespaces' or 'none', got {isolation!r}")
        if runtime not in ("processes", "containers") or (runtime == "containers") != bool(image):
            raise ValueError(f"runtime must be 'processes', or 'containers' with an image; got {runtime!r}, {image!r}")
        self.runtime_kind = runtime
        self.image = image
        self.shared_dirs = tuple(shared_dirs)
        self.engine: str | None = None
        self.cluster_id = containers.cluster_id_of(str(paths.root))
        self.service = service
        self.paths = paths
        self.pool = AddressPool(prefix)
        self.ssh_port = ssh_port
        self.isolation = isolation
        self.stop_grace = stop_grace
        self._runtimes: dict[str, PodRuntime] = {}
        self._token: int | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        if self.runtime_kind == "containers":
            self.engine = containers.find_engine()
            engine, image = self.engine_and_image()
            containers.check_image(engine, image)
            await asyncio.to_thread(containers.remove_labelled, engine, self.cluster_id)
        elif self.isolation == "namespaces":
            ensure_data_mountpoint()
        self.paths.pods_dir.mkdir(parents=True, exist_ok=True)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._token = self.service.store.subscribe(queue.put_nowait)
        for pod in self.service.list()[0]:
            queue.put_nowait(Event("ADDED", pod, None, 0))
        self._task = asyncio.create_task(self._loop(queue))

    def engine_and_image(self) -> tuple[str, str]:
        """The container engine and worker image of a started ``runtime="containers"`` kubelet.
        Raises KubeletError for a ``runtime="processes"`` kubelet or one not started."""
        if self.engine is None or self.image is None:
            raise KubeletError("no container engine: the kubelet runs processes or is not started")
        return self.engine, self.image

    async def stop(self) -> None:
        """Stop following the store and stop every pod (SIGTERM, SIGKILL after ``stop_grace``)."""
        if self._token is not None:
            self.service.store.unsubscribe(self._token)
            self._token = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        runtimes = list(self._runtimes.values())
        for rt in runtimes:
            rt.terminate(self.stop_grace)
        tasks = [rt.task for rt in runtimes if rt.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.engine is not None:
            try:
                await asyncio.to_thread(containers.remove_labelled, self.engine, self.cluster_id)
            except KubeletError as exc:
                log.warning("kubelet: %s", exc)

    def forget(self, rt: PodRuntime) -> None:
        if self._runtimes.get(rt.uid) is rt:
            del self._runtimes[rt.uid]

    def log_path(self, pod: dict):
        """The sshd log of a pod this kubelet runs, or None for pods of other nodes."""
        if not managed(pod):
            return None
        return self.paths.pod_dir(pod["metadata"]["namespace"], pod["metadata"]["name"]) / "sshd.log"

    def runtime(self, uid: str) -> PodRuntime | None:
        return self._runtimes.get(uid)

    def _holding(self) -> int:
        """Pods of this node that hold a place (``capacity``)."""
        return sum(1 for p in self.service.list()[0] if p["spec"].get("nodeName") == NODE
                   and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))

    def _bind_waiting(self) -> None:
        """With a ``capacity``: bind the unbound pods, oldest first, while places are free."""
        free = self.capacity - self._holding()
        if free <= 0:
            return
        waiting = sorted((p for p in self.service.list()[0] if managed(p) and not p["spec"].get("nodeName")
                          and not p["metadata"].get("deletionTimestamp")),
                         key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), p["metadata"]["name"]))
        for pod in waiting[:free]:
            self.service.bind(pod["metadata"]["namespace"], pod["metadata"]["name"], NODE)

    async def _loop(self, queue: asyncio.Queue[Event]) -> None:
        while True:
            event = await queue.get()
            try:
                self._handle(event.type, event.object)
                if self.capacity:
                    self._bind_waiting()
            except ApiError as exc:
                log.warning("kubelet: %s", exc)
            except Exception:  # one bad event must not stop the kubelet
                log.exception("kubelet: failed to handle a %s event", event.type)

    def _handle(self, kind: str, pod: dict) -> None:
        if not managed(pod):
            return
        meta = pod["metadata"]
        rt = self._runtimes.get(meta["uid"])
        if kind == "DELETED":
            if rt is not None:
                rt.terminate(0)
            return
        current = self.service.store.find(meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        pod = current
        if not pod["spec"].get("nodeName"):
            if not self.capacity:  # else _bind_waiting binds it when a place is free
                self.service.bind(meta["namespace"], meta["name"], NODE)
            return
        if pod["metadata"].get("deletionTimestamp"):
            if rt is not None:
                deadline = pods.parse_time(pod["metadata"]["deletionTimestamp"])
                rt.terminate((deadline - datetime.now(timezone.utc)).total_seconds())
            else:
                self.service.finish_deletion(meta["namespace"], meta["name"], meta["uid"])
            return
        if rt is None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            rt = (ContainerPodRuntime if self.runtime_kind == "containers" else PodRuntime)(self, pod)
            key = (rt.namespace, rt.name)
            older = [r.task for r in self._runtimes.values() if (r.namespace, r.name) == key and r.task]
            rt.previous = older[-1] if older else None
            self._runtimes[rt.uid] = rt
            rt.task = asyncio.create_task(rt.run())
