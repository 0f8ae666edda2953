"""The launcher pod's ``worker-scaler`` sidecar: workers up when a launcher pod starts, down to
zero when its launcher has finished (deploy/job/launcher.yaml).

    python -m elastic.launch.scale_workers --statefulset NAME --min-replicas N \\
        --pod POD --container launcher [--namespace NS] [--kubeconfig FILE]

1. start: reads the StatefulSet's scale subresource and raises ``spec.replicas`` to
   ``--min-replicas`` when it is below (a new job: the manifest sets no replicas; a job run
   again after a finished one: 0). A larger size (the user scaled up) is kept;
2. then blocks until SIGTERM (or SIGINT): the kubelet stops a native sidecar once the pod's
   main container has ended, and also when the pod is deleted;
3. on SIGTERM reads its own pod (``--pod``) until the main container (``--container``) shows a
   terminated state (up to ``--finish-timeout`` seconds):
   - the pod is being deleted (eviction, preemption, ``kubectl delete pod``): the workers are
     kept, the Job's next pod uses them;
   - ``--container`` has terminated: the job's attempt is over, the StatefulSet is scaled to
     0 and the GPUs are free (a retry's scaler raises it again);
   - no terminated state within the time: nothing is changed.

Needs ``get``/``patch`` on ``statefulsets/scale`` for NAME and ``get`` on pods. Exit codes: 0
after the stop (whatever the decision), 2 bad input (flags, no cluster configuration), 1 an
API call failed. What the API returns is checked before use (``stop_decision``).
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from elastic.common.cli import run_main
from elastic.errors import ConfigError, LaunchError

if TYPE_CHECKING:  # the client is imported when connecting (it is slow to import)
    from kubernetes.client import AppsV1Api, CoreV1Api

log = logging.getLogger("elastic.scale_workers")
SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class Decision:
    """What to do with the workers when the sidecar is stopped: ``keep``, ``zero`` or ``wait``."""

    action: str
    reason: str


def start_replicas(current: object, minimum: int) -> int | None:
    """The replicas to set when a launcher pod starts: ``minimum`` when ``current`` is below it
    (or not a valid count), else None (leave the user's size alone)."""
    if isinstance(current, int) and not isinstance(current, bool) and current >= minimum:
        return None
    return minimum


def _object(value: object) -> dict:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def stop_decision(pod: object, container: str) -> Decision:
    """Decide from the pod (the API's JSON, camelCase) what the stop means. Pure; never raises
    on malformed input (that is ``wait``: the caller reads the pod again)."""
    if not isinstance(pod, dict):
        return Decision("wait", "no pod in the answer")
    if _object(pod.get("metadata")).get("deletionTimestamp"):
        return Decision("keep", "the launcher pod is being deleted: the workers stay for the Job's next pod")
    statuses = _object(pod.get("status")).get("containerStatuses")
    for item in statuses if isinstance(statuses, list) else []:
        if not isinstance(item, dict) or item.get("name") != container:
            continue
        terminated = _object(item.get("state")).get("terminated")
        if isinstance(terminated, dict):
            code = terminated.get("exitCode")
            code = code if isinstance(code, int) and not isinstance(code, bool) else "unknown"
            return Decision("zero", f"{container} ended with exit code {code}")
    return Decision("wait", f"{container} has not ended yet")


class Cluster:
    """The two API calls the scaler makes, through the official client (loaded lazily)."""

    def __init__(self, namespace: str, kubeconfig: str | None) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self._apps: AppsV1Api | None = None
        self._core: CoreV1Api | None = None

    def connect(self) -> None:
        """Load the configuration (in-cluster, or ``kubeconfig``); ConfigError when neither works."""
        import kubernetes

        try:
            if self.kubeconfig:
                kubernetes.config.load_kube_config(config_file=self.kubeconfig)
            else:
                kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException as exc:
            raise ConfigError(f"no cluster configuration: {exc}") from None
        api = kubernetes.client.ApiClient()
        self._apps = kubernetes.client.AppsV1Api(api)
        self._core = kubernetes.client.CoreV1Api(api)

    @property
    def apps(self) -> AppsV1Api:
        """The apps/v1 API; RuntimeError before ``connect``."""
        if self._apps is None:
            raise RuntimeError("Cluster.connect() was not called")
        return self._apps

    @property
    def core(self) -> CoreV1Api:
        """The core/v1 API; RuntimeError before ``connect``."""
        if self._core is None:
            raise RuntimeError("Cluster.connect() was not called")
        return self._core

    def _call(self, what: str, fn: Callable, *args) -> object:
        """One API call; its JSON body as it came (not the client's models: they reject
        answers they do not expect with their own errors). LaunchError on any failure."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = fn(*args, _request_timeout=10, _preload_content=False)
            return json.loads(response.data)
        except ApiException as exc:
            raise LaunchError(f"{what}: {exc.status} {exc.reason}") from None
        except (HTTPError, OSError) as exc:
            raise LaunchError(f"{what}: {exc}") from None
        except ValueError as exc:
            raise LaunchError(f"{what}: the answer is not JSON ({exc})") from None

    def replicas(self, name: str) -> object:
        """``spec.replicas`` of the StatefulSet's scale (unchecked: see ``start_replicas``)."""
        scale = self._call(f"read statefulsets/{name}/scale", self.apps.read_namespaced_stateful_set_scale,
                           name, self.namespace)
        spec = scale.get("spec") if isinstance(scale, dict) else None
        return spec.get("replicas") if isinstance(spec, dict) else None

    def scale(self, name: str, replicas: int) -> None:
        self._call(f"scale statefulsets/{name} to {replicas}", self.apps.patch_namespaced_stateful_set_scale,
                   name, self.namespace, {"spec": {"replicas": replicas}})

    def pod(self, name: str) -> object:
        """The pod's JSON (unchecked: see ``stop_decision``)."""
        return self._call(f"read pod {name}", self.core.read_namespaced_pod, name, self.namespace)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see python -m elastic.launch.scale_workers --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m elastic.launch.scale_workers",
                description="Raise the job's worker StatefulSet to --min-replicas now; scale it to "
                            "zero on SIGTERM once --container of --pod has ended.")
    p.add_argument("--statefulset", required=True, help="the job's worker StatefulSet")
    p.add_argument("--min-replicas", type=_positive, required=True, help="workers to have at start")
    p.add_argument("--pod", required=True, help="this pod's name (downward API)")
    p.add_argument("--container", default="launcher", help="the main container (default launcher)")
    p.add_argument("--namespace", default=None, help="default: the service account's namespace")
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    p.add_argument("--finish-timeout", type=float, default=30.0,
                   help="seconds to wait for --container's terminated state after SIGTERM (default 30)")
    return p


def _namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return args.namespace
    try:
        with open(SA_NAMESPACE_FILE) as fh:
            value = fh.read().strip()
    except OSError as exc:
        raise ConfigError(f"--namespace not given and {SA_NAMESPACE_FILE}: {exc.strerror}") from None
    if not value:
        raise ConfigError(f"{SA_NAMESPACE_FILE} is empty")
    return value


def run(args: argparse.Namespace, wait_for_stop: Callable[[], int], clock=time.monotonic,
        pause: Callable[[float], None] = time.sleep) -> int:
    """Start, block in ``wait_for_stop`` (returns the signal), then act on the decision."""
    cluster = Cluster(_namespace(args), args.kubeconfig)
    cluster.connect()
    wanted = start_replicas(cluster.replicas(args.statefulset), args.min_replicas)
    if wanted is not None:
        cluster.scale(args.statefulset, wanted)
        log.info("statefulsets/%s scaled to %d", args.statefulset, wanted)
    else:
        log.info("statefulsets/%s already has at least %d replicas", args.statefulset, args.min_replicas)
    signum = wait_for_stop()
    log.info("stopped by signal %d", signum)
    deadline = clock() + args.finish_timeout
    while True:
        try:
            decision = stop_decision(cluster.pod(args.pod), args.container)
        except LaunchError as exc:  # a blip: read again until the deadline
            if clock() >= deadline:
                raise
            decision = Decision("wait", str(exc))
        if decision.action != "wait" or clock() >= deadline:
            break
        pause(1.0)
    if decision.action == "zero":
        cluster.scale(args.statefulset, 0)
        log.info("%s: statefulsets/%s scaled to 0", decision.reason, args.statefulset)
    elif decision.action == "keep":
        log.info("%s", decision.reason)
    else:
        log.warning("%s after %.0f s: the workers are left as they are", decision.reason, args.finish_timeout)
    return 0


def _block_and_wait() -> Callable[[], int]:
    """Block SIGTERM/SIGINT now (none is lost during start-up); the returned call waits for one."""
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    return lambda: signal.sigwait(signals)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="worker-scaler: %(message)s")
    wait_for_stop = _block_and_wait()
    return run_main("worker-scaler", lambda: run(args, wait_for_stop))


if __name__ == "__main__":
    sys.exit(main())
