"""The launcher pod's ``worker-scaler`` sidecar: workers up when a launcher pod starts, down to
zero when the launcher Job is over (deploy/job/launcher.yaml).

    python -m elastic.launch.scale_workers --statefulset NAME --min-replicas N \\
        --pod POD --container launcher [--job JOB] [--namespace NS] [--kubeconfig FILE]

1. start: with ``--job``, reads the Job and makes it the StatefulSet's owner (its
   ``metadata.ownerReferences`` become that one Job: deleting the Job deletes the workers);
   then reads the StatefulSet's scale subresource and raises ``spec.replicas`` to
   ``--min-replicas`` when it is below (a new job: the manifest sets no replicas; a job run
   again after a finished one: 0). A larger size (the user scaled up) is kept. Each call is
   retried until ``--start-timeout`` seconds have passed;
2. then blocks until SIGTERM (or SIGINT): the kubelet stops a native sidecar once the pod's
   main container has ended, and also when the pod is deleted;
3. on SIGTERM reads its own pod (``--pod``) and the Job until ``stop_decision`` decides, up
   to ``--finish-timeout`` seconds (the pod's grace period must be longer):
   - the pod is being deleted, or has the ``DisruptionTarget`` condition (eviction,
     preemption, node pressure, ``kubectl delete pod``): the Job ignores that failure and
     makes a new pod; the workers are kept for it;
   - ``--container`` exited 0 (done) or 2 (bad input: the Job's podFailurePolicy fails it):
     the StatefulSet is scaled to 0 and the GPUs are free;
   - any other exit (1, an OOM kill's 137): a retry when the Job's failures so far are below
     its ``backoffLimit`` (the workers and their size are kept for the next pod), else the
     Job's last try (scaled to 0). Without ``--job`` (or the Job unreadable) the workers are kept;
   - no decision within the time: nothing is changed.
   Scaling to 0 is retried until the same deadline.

Needs ``get``/``patch`` on ``statefulsets/scale`` for NAME, ``patch`` on the StatefulSet and
``get`` on the Job (with ``--job``), ``get`` on pods. Exit codes: 0 after the stop (whatever
the decision), 2 bad input (flags, no cluster configuration), 1 an API call failed for good.
What the API returns is checked before use (``stop_decision``, ``owner_reference``).
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
from typing import TYPE_CHECKING

from elastic.errors import ConfigError, ElasticError, LaunchError, TransientError
from shared.argparser import OneLineParser
from shared.runner import run_main

if TYPE_CHECKING:  # the client is imported when connecting (it is slow to import)
    from kubernetes.client import AppsV1Api, BatchV1Api, CoreV1Api

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


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# the Job's own default backoffLimit
DEFAULT_BACKOFF_LIMIT = 6
# exit codes that end the Job whatever its backoffLimit: success, and the podFailurePolicy's
# FailJob rule for bad input (deploy/job/launcher.yaml)
FINAL_CODES = {0: "the job is done", 2: "bad input: the Job fails without a retry"}


def stop_decision(pod: object, container: str, job: object = None) -> Decision:
    """Decide from the pod and the Job (the API's JSON, camelCase; ``job`` None when unknown)
    what the stop means: see the module docstring. Pure; never raises on malformed input (a
    pod without an answer is ``wait``: the caller reads it again)."""
    if not isinstance(pod, dict):
        return Decision("wait", "no pod in the answer")
    if _object(pod.get("metadata")).get("deletionTimestamp"):
        return Decision("keep", "the launcher pod is being deleted: the workers stay for the Job's next pod")
    conditions = _object(pod.get("status")).get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, dict) and cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return Decision("keep", f"the launcher pod was disrupted ({cond.get('reason') or 'DisruptionTarget'}): "
                                    "the workers stay for the Job's next pod")
    statuses = _object(pod.get("status")).get("containerStatuses")
    for item in statuses if isinstance(statuses, list) else []:
        if not isinstance(item, dict) or item.get("name") != container:
            continue
        terminated = _object(item.get("state")).get("terminated")
        if not isinstance(terminated, dict):
            continue
        code = _count(terminated.get("exitCode"))
        if code in FINAL_CODES:
            return Decision("zero", f"{container} ended with exit code {code}: {FINAL_CODES[code]}")
        shown = "unknown" if code is None else code
        if not isinstance(job, dict):
            return Decision("keep", f"{container} ended with exit code {shown}; the Job may try again "
                                    "(not known): the workers stay")
        limit = _count(_object(job.get("spec")).get("backoffLimit"))
        limit = DEFAULT_BACKOFF_LIMIT if limit is None else limit
        failed = _count(_object(job.get("status")).get("failed")) or 0
        if failed + 1 > limit:
            return Decision("zero", f"{container} ended with exit code {shown}: the Job's last try "
                                    f"({failed + 1} failures, backoffLimit {limit})")
        return Decision("keep", f"{container} ended with exit code {shown}: the Job tries again "
                                f"(failure {failed + 1} of {limit + 1} allowed): the workers stay")
    return Decision("wait", f"{container} has not ended yet")


def owner_reference(job: object) -> dict:
    """The ownerReference that makes ``job`` (the API's JSON) an owner; LaunchError when the
    Job has no name or uid."""
    meta = _object(_object(job).get("metadata"))
    name, uid = meta.get("name"), meta.get("uid")
    if not (isinstance(name, str) and name and isinstance(uid, str) and uid):
        raise LaunchError("the Job in the answer has no name or uid")
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}


class Cluster:
    """The two API calls the scaler makes, through the official client (loaded lazily)."""

    def __init__(self, namespace: str, kubeconfig: str | None) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self._apps: AppsV1Api | None = None
        self._core: CoreV1Api | None = None
        self._batch: BatchV1Api | None = None

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
        self._batch = kubernetes.client.BatchV1Api(api)

    @property
    def apps(self) -> AppsV1Api:
        """The apps/v1 API; RuntimeError before ``connect``."""
        if self._apps is None:
            raise RuntimeError("Cluster.connect() was not called")
        return self._apps

    @property
    def batch(self) -> BatchV1Api:
        """The batch/v1 API; RuntimeError before ``connect``."""
        if self._batch is None:
            raise RuntimeError("Cluster.connect() was not called")
        return self._batch

    @property
    def core(self) -> CoreV1Api:
        """The core/v1 API; RuntimeError before ``connect``."""
        if self._core is None:
            raise RuntimeError("Cluster.connect() was not called")
        return self._core

    def _call(self, what: str, fn: Callable, *args, **kwargs) -> object:
        """One API call; its JSON body as it came (not the client's models: they reject
        answers they do not expect with their own errors). LaunchError on any failure."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = fn(*args, _request_timeout=10, _preload_content=False, **kwargs)
            return json.loads(response.data)
        except ApiException as exc:
            transient = not exc.status or exc.status == 429 or exc.status >= 500
            raise (TransientError if transient else LaunchError)(f"{what}: {exc.status} {exc.reason}") from None
        except (HTTPError, OSError) as exc:
            raise TransientError(f"{what}: {exc}") from None
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

    def job(self, name: str) -> object:
        """The Job's JSON (unchecked: see ``stop_decision``, ``owner_reference``)."""
        return self._call(f"read job {name}", self.batch.read_namespaced_job, name, self.namespace)

    def own(self, name: str, owner: dict) -> None:
        """Make ``owner`` the StatefulSet's only ownerReference (a JSON merge patch)."""
        self._call(f"set the owner of statefulsets/{name}", self.apps.patch_namespaced_stateful_set, name,
                   self.namespace, {"metadata": {"ownerReferences": [owner]}},
                   _content_type="application/merge-patch+json")

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


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return number


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m elastic.launch.scale_workers",
                description="Raise the job's worker StatefulSet to --min-replicas now; scale it to "
                            "zero on SIGTERM once --container of --pod has ended.")
    p.add_argument("--statefulset", required=True, help="the job's worker StatefulSet")
    p.add_argument("--min-replicas", type=_positive, required=True, help="workers to have at start")
    p.add_argument("--pod", required=True, help="this pod's name (downward API)")
    p.add_argument("--container", default="launcher", help="the main container (default launcher)")
    p.add_argument("--job", default=None, help="the launcher Job: made the StatefulSet's owner, read for retries")
    p.add_argument("--namespace", default=None, help="default: the service account's namespace")
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    p.add_argument("--start-timeout", type=_seconds, default=120.0,
                   help="seconds to retry the start-up calls (default 120)")
    p.add_argument("--finish-timeout", type=_seconds, default=45.0,
                   help="seconds after SIGTERM to decide and scale to zero (default 45; below the pod's grace)")
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


def retry(call: Callable[[], object], deadline: float, clock: Callable[[], float],
          pause: Callable[[float], None]) -> object:
    """``call()``'s result; a TransientError (an API blip) is retried every second until
    ``deadline`` (on ``clock``), then raised; any other LaunchError (403, 404) at once."""
    while True:
        try:
            return call()
        except TransientError as exc:
            if clock() >= deadline:
                raise
            log.warning("%s (trying again)", exc)
            pause(1.0)


def run(args: argparse.Namespace, wait_for_stop: Callable[[], int], clock=time.monotonic,
        pause: Callable[[float], None] = time.sleep) -> int:
    """Start, block in ``wait_for_stop`` (returns the signal), then act on the decision."""
    cluster = Cluster(_namespace(args), args.kubeconfig)
    cluster.connect()
    sts = args.statefulset
    deadline = clock() + args.start_timeout
    if args.job:
        owner = owner_reference(retry(lambda: cluster.job(args.job), deadline, clock, pause))
        retry(lambda: cluster.own(sts, owner), deadline, clock, pause)
        log.info("statefulsets/%s is owned by jobs/%s (deleting the Job deletes the workers)", sts, args.job)
    wanted = start_replicas(retry(lambda: cluster.replicas(sts), deadline, clock, pause), args.min_replicas)
    if wanted is not None:
        retry(lambda: cluster.scale(sts, wanted), deadline, clock, pause)
        log.info("statefulsets/%s scaled to %d", sts, wanted)
    else:
        log.info("statefulsets/%s already has at least %d replicas", sts, args.min_replicas)
    signum = wait_for_stop()
    log.info("stopped by signal %d", signum)
    deadline = clock() + args.finish_timeout
    while True:
        try:
            pod = cluster.pod(args.pod)
            job = None
            if args.job:
                try:
                    job = cluster.job(args.job)
                except LaunchError as exc:
                    log.warning("%s: whether the Job tries again is not known", exc)
            decision = stop_decision(pod, args.container, job)
        except LaunchError as exc:  # a blip: read again until the deadline
            if clock() >= deadline:
                raise
            decision = Decision("wait", str(exc))
        if decision.action != "wait" or clock() >= deadline:
            break
        pause(1.0)
    if decision.action == "zero":
        retry(lambda: cluster.scale(sts, 0), deadline, clock, pause)
        log.info("%s: statefulsets/%s scaled to 0", decision.reason, sts)
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
    return run_main("worker-scaler", lambda: run(args, wait_for_stop), usage=ConfigError, failure=ElasticError)


if __name__ == "__main__":
    sys.exit(main())
