"""The launcher pod's worker scaler: the job's workers at their desired size when a launcher
pod starts, at zero when the launcher Job is over or suspended (deploy/job/launcher.yaml).

    python -m elastic.scaler.scale_workers --workers KIND/NAME --min-replicas FLOOR \\
        --replicas DESIRED [--max-replicas CAP] --pod POD --container launcher [--job JOB] \\
        [--template PODTEMPLATE] [--phase start|stop|both] [--namespace NS] [--kubeconfig FILE]

KIND is ``replicasets`` (deploy/'s workers), ``statefulsets`` or ``deployments`` (apps/v1).
``--phase start`` does step 1 and exits (a regular init container: a failure fails the pod,
and the Job's podFailurePolicy fails the Job on exit 2); ``--phase stop`` does steps 2-3 (the
native sidecar); ``both`` (the default) does all three.

1. start, with ``--template`` (deploy/: the workers owned by the Job from birth): reads the
   Job and the workload. No workload: makes it from the PodTemplate ``--template``
   (``new_workload``: its selector the template's labels, ``--replicas`` workers, and one
   ownerReference, to the Job, with ``controller`` and ``blockOwnerDeletion``, in the create
   itself: no worker pod ever exists without an owner, deleting the Job deletes the workers,
   and a foreground delete waits for them). A workload the Job owns (a retry of this Job) is
   kept as it is, template included. One being deleted, or owned by an earlier Job of the same
   name (the garbage collector deletes it), is waited for until ``--start-timeout``, then
   made anew; at that time ``WorkloadGone`` (exit 2). One no Job owns (made by hand, or by an
   earlier deploy/ that applied the ReplicaSet itself) is refused at once (``WorkloadGone``,
   exit 2: the scaler never adopts workers). Without ``--template`` the workload must exist:
   one being deleted is ``WorkloadGone`` at once. Then sets ``spec.replicas`` through the
   scale subresource to ``start_replicas``: the desired size ``--replicas`` (what ``--max-np``
   needs) when below it, ``--max-replicas`` when above that, else kept. Each call is retried
   until ``--start-timeout`` seconds have passed;
2. then waits for SIGTERM (or SIGINT): the kubelet stops a native sidecar once the pod's
   main container has ended, and also when the pod is deleted. Every ``--check-every``
   seconds meanwhile it reads the size and lowers it to ``--max-replicas`` when above (a cap:
   pods beyond what ``--max-np`` can use would be prepared, synced and idle);
3. on SIGTERM reads its own pod (``--pod``) and the Job until ``stop_decision`` decides, up
   to ``--finish-timeout`` seconds (the pod's grace period must be longer):
   - the Job is suspended (Kueue preempting it, ``kubectl patch job --suspend``): zero, the
     GPUs are free; the Job's next pod raises them again;
   - the Job is over or about to be (a ``Failed``/``FailureTarget``/``Complete`` condition:
     its ``activeDeadlineSeconds`` passed, a FailJob rule): zero (``job_over``);
   - the pod has the ``DisruptionTarget`` condition (eviction, preemption, node pressure):
     the Job ignores that failure and makes a new pod; the workers are kept for it;
   - ``--container`` exited 0 (done), 2 (bad input: the Job's podFailurePolicy fails it) or
     75 (no first world within ``--first-world-timeout``: the pool is capped; the Job's
     podFailurePolicy ignores it and tries again; ``elastic.launch.gang``): zero;
   - ``--container`` exited 76 (fenced: ``elastic-run --leader-election`` lost its Lease to
     another launcher pod of the Job, which leads; the Job's podFailurePolicy ignores it):
     the workers are kept, never zeroed under the new leader;
   - any other exit (1; 69, workers failing, ``elastic.launch.shortfall``; an OOM kill's 137;
     a ``kubectl delete pod``'s 143): a retry when the Job's failures with this one
     (``failures_after``: the counted ones, the ones not counted yet, and for 69 every
     launcher pod still running, since a standby exits with its leader's 69) stay within its
     ``backoffLimit`` (the workers and their size are kept for the next pod or for the
     standby that leads now), else the Job's last try (zero). Without ``--job`` (or the Job
     unreadable) the workers are kept;
   - a pod being deleted whose ``--container`` has not ended yet, or no decision within the
     time: nothing is changed.
   Scaling to 0 is retried until the same deadline. Before it, how ``--container`` ended is
   recorded as an Event on the Job (``failure_event``: a Warning ``WorkersFailing`` for 69 or
   ``LauncherFailed``, a Normal ``NoCapacity`` for 75, with the container's last line): what
   ``kubectl describe job`` shows; a failure to record it is only logged.

Two launcher pods of one Job at once (deploy/: a leader and a warm standby, ``elastic-run
--leader-election``) run two starts and two stops. Two starts may create the workload at the
same moment: the loser's create answers 409 and it judges the one made (the Job's own: kept,
its size set to the same value). A standby's stop never zeroes the workers while its leader
runs: a standby ends with 0, 2 or 69 only when its leader did (the job is over, or the
failure counted for every launcher pod), with 143 when it is deleted (a counted failure: zero
only when it makes the Job fail, when the Job stops the leader too) or on a disruption (kept).

Needs ``get`` on the workload, ``get``/``patch`` on its ``scale``, ``get`` on pods; with
``--job``: ``get`` on the Job; with ``--template``: ``get`` on that PodTemplate, ``create`` on
the workload's kind and ``update`` on ``jobs/finalizers`` (what the API asks of whoever sets
``blockOwnerDeletion``); ``create`` on events (the launcher's end, on the Job). Never
``patch``, ``update`` or ``delete`` on the workload itself.
Exit codes: 0 after the stop (or after the start with ``--phase start``), 2 bad input (flags,
no cluster configuration, a workload being deleted or owned by no Job, a PodTemplate without
labels or containers), 1 an API call failed for good. What the API returns is checked before
use (``stop_decision``, ``owner_reference``, ``ownership``, ``pod_template``, ``being_deleted``).
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import secrets
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from elastic.errors import ConfigError, ElasticError, LaunchError, TransientError, WorkloadGone
from shared.argparser import OneLineParser
from shared.exitcodes import EXIT_FENCED, EXIT_NO_CAPACITY, EXIT_OK, EXIT_WORKERS_FAILING
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


# apps/v1 kinds with a scale subresource, by their resource name: the client's method infix
WORKLOAD_KINDS = {"replicasets": "replica_set", "statefulsets": "stateful_set", "deployments": "deployment"}
# ... and their kind, for a workload the scaler makes
KIND_NAMES = {"replicasets": "ReplicaSet", "statefulsets": "StatefulSet", "deployments": "Deployment"}


@dataclass(frozen=True)
class Ownership:
    """Whose an existing workload is, to the start: ``ours`` (the Job owns it: keep it),
    ``wait`` (being deleted, or an earlier Job's: it goes) or ``refuse`` (no Job owns it)."""

    action: str
    reason: str


def start_replicas(current: object, desired: int, cap: int | None = None) -> int | None:
    """The replicas to set when a launcher pod starts: ``desired`` when ``current`` is below it
    (or not a valid count: a new workload, or 0 after a finished run), ``cap`` (default
    ``desired``) when above that, else None (a size between the two is left alone)."""
    cap = desired if cap is None else cap
    if not (isinstance(current, int) and not isinstance(current, bool)) or current < desired:
        return desired
    return cap if current > cap else None


def capped_replicas(current: object, cap: int) -> int | None:
    """``cap`` when ``current`` is a count above it (someone scaled past what --max-np can
    use), else None."""
    if isinstance(current, int) and not isinstance(current, bool) and current > cap:
        return cap
    return None


def being_deleted(workload: object) -> str | None:
    """The workload's ``metadata.deletionTimestamp`` (a non-empty string) when it is being
    deleted, else None; any other answer counts as not being deleted."""
    stamp = _object(_object(workload).get("metadata")).get("deletionTimestamp")
    return stamp if isinstance(stamp, str) and stamp else None


def _object(value: object) -> dict:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# the Job's own default backoffLimit
DEFAULT_BACKOFF_LIMIT = 6
# exit codes that end the Job whatever its backoffLimit: success, and the podFailurePolicy's
# FailJob rule for bad input (deploy/job/launcher.yaml)
FINAL_CODES = {0: "the job is done", 2: "bad input: the Job fails without a retry",
               EXIT_NO_CAPACITY: "no capacity for the first world (--first-world-timeout): the workers are "
                                 "freed for other jobs; the Job tries again without counting a failure"}


# Job conditions that say it is over, or about to be (the Job controller sets the *Target ones
# before it stops the pods: activeDeadlineSeconds, a podFailurePolicy FailJob, backoffLimit)
OVER_CONDITIONS = ("Failed", "FailureTarget", "Complete", "SuccessCriteriaMet")


def job_over(job: object) -> str:
    """``"<condition>: <reason>"`` when the Job (the API's JSON) has a condition of
    ``OVER_CONDITIONS`` set, else ``""`` (also for a malformed or unknown Job). Pure."""
    conditions = _object(_object(job).get("status")).get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, dict) and cond.get("type") in OVER_CONDITIONS and cond.get("status") == "True":
            reason = cond.get("reason")
            return f"{cond['type']}: {reason}" if isinstance(reason, str) and reason else str(cond["type"])
    return ""


def failures_after(job: dict, code: int | None) -> int:
    """The Job's failures once this launcher pod's failure (exit ``code``) is counted: the
    counted ones (``status.failed``), the ones the Job controller has seen but not counted yet
    (``status.uncountedTerminatedPods.failed``: another launcher pod that ended a moment ago),
    and this pod's. Exit ``EXIT_WORKERS_FAILING`` is a verdict of ``elastic-run
    --leader-election`` (``elastic.launch.leadership``): every launcher pod of the Job still
    running (``status.active``, this one included) exits with it, so each is counted. Counting
    too many only frees the workers the Job's next pod raises again; too few would leave them
    to a Job that failed. Pure; malformed fields count as none."""
    status = _object(job.get("status"))
    failed = _count(status.get("failed")) or 0
    uncounted = _object(status.get("uncountedTerminatedPods")).get("failed")
    failed += len(uncounted) if isinstance(uncounted, list) else 0
    ending = 1
    if code == EXIT_WORKERS_FAILING:
        ending = max(1, _count(status.get("active")) or 0)
    return failed + ending


def stop_decision(pod: object, container: str, job: object = None) -> Decision:
    """Decide from the pod and the Job (the API's JSON, camelCase; ``job`` None when unknown)
    what the stop means: see the module docstring. Pure; never raises on malformed input (a
    pod without an answer is ``wait``: the caller reads it again)."""
    if not isinstance(pod, dict):
        return Decision("wait", "no pod in the answer")
    if isinstance(job, dict) and _object(job.get("spec")).get("suspend") is True:
        return Decision("zero", "the Job is suspended (Kueue, or spec.suspend): the workers free their "
                                "GPUs; the Job's next pod raises them again")
    over = job_over(job)
    if over:
        return Decision("zero", f"the Job is over ({over}): the workers free their GPUs")
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
        if code == EXIT_FENCED:
            return Decision("keep", f"{container} ended with exit code {code}: fenced, another launcher of "
                                    "the job holds its Lease and leads; the Job ignores this exit: the "
                                    "workers stay")
        shown = "unknown" if code is None else code
        if not isinstance(job, dict):
            return Decision("keep", f"{container} ended with exit code {shown}; the Job may try again "
                                    "(not known): the workers stay")
        limit = _count(_object(job.get("spec")).get("backoffLimit"))
        limit = DEFAULT_BACKOFF_LIMIT if limit is None else limit
        failures = failures_after(job, code)
        if failures > limit:
            return Decision("zero", f"{container} ended with exit code {shown}: the Job's last try "
                                    f"({failures} failures, backoffLimit {limit})")
        return Decision("keep", f"{container} ended with exit code {shown}: the Job tries again "
                                f"(failure {failures} of {limit + 1} allowed): the workers stay")
    if _object(pod.get("metadata")).get("deletionTimestamp"):
        return Decision("wait", f"the launcher pod is being deleted; {container} has not ended yet")
    return Decision("wait", f"{container} has not ended yet")


# the Event the stop records on the Job for the launcher's end: exit code -> (type, reason)
EVENT_REASONS = {EXIT_WORKERS_FAILING: ("Warning", "WorkersFailing"),
                 EXIT_NO_CAPACITY: ("Normal", "NoCapacity")}
EVENT_MESSAGE_LIMIT = 1024  # characters of the launcher's last line in the Event
EVENT_SOURCE = "elastic-horovod-worker-scaler"


def _last_line(message: object) -> str:
    """The last non-blank line of a container's termination message (the kubelet's log tail
    with ``terminationMessagePolicy: FallbackToLogsOnError``), printable and bounded; ""."""
    if not isinstance(message, str):
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    line = "".join(ch if ch.isprintable() else "?" for ch in lines[-1])
    return line if len(line) <= EVENT_MESSAGE_LIMIT else line[:EVENT_MESSAGE_LIMIT - 3] + "..."


def failure_event(pod: object, container: str, job: object, now: str, suffix: str) -> dict | None:
    """The core/v1 Event to record on ``job`` (the API's JSON) for how ``container`` of ``pod``
    ended, or None: nothing to say (still running, exit 0, no Job with a name and uid). A
    failure gets a Warning (``WorkersFailing`` for ``EXIT_WORKERS_FAILING``, else
    ``LauncherFailed``); no capacity (``EXIT_NO_CAPACITY``) a Normal ``NoCapacity``. The message
    is the container's last line (``_last_line``), else its exit code: what ``kubectl describe
    job`` shows, where alerts on Job events look. ``now``: an RFC 3339 time; ``suffix``: makes
    the Event's name unique. Pure; never raises on malformed input."""
    meta = _object(_object(job).get("metadata"))
    name, uid, namespace = meta.get("name"), meta.get("uid"), meta.get("namespace")
    if not (isinstance(name, str) and name and isinstance(uid, str) and uid):
        return None
    statuses = _object(_object(pod).get("status")).get("containerStatuses")
    for item in statuses if isinstance(statuses, list) else []:
        if not isinstance(item, dict) or item.get("name") != container:
            continue
        terminated = _object(_object(item.get("state")).get("terminated"))
        code = _count(terminated.get("exitCode"))
        if code is None or code == 0:
            return None
        kind, reason = EVENT_REASONS.get(code, ("Warning", "LauncherFailed"))
        line = _last_line(terminated.get("message"))
        message = f"{container} exited {code}: {line}" if line else f"{container} exited {code}"
        involved = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
        if isinstance(namespace, str) and namespace:
            involved["namespace"] = namespace
        return {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{name}.{suffix}"},
                "involvedObject": involved, "type": kind, "reason": reason, "message": message,
                "source": {"component": EVENT_SOURCE}, "reportingComponent": EVENT_SOURCE,
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}
    return None


def owner_reference(job: object) -> dict:
    """The ownerReference that makes ``job`` (the API's JSON) the controlling owner; LaunchError
    when the Job has no name or uid."""
    meta = _object(_object(job).get("metadata"))
    name, uid = meta.get("name"), meta.get("uid")
    if not (isinstance(name, str) and name and isinstance(uid, str) and uid):
        raise LaunchError("the Job in the answer has no name or uid")
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def _shown(value: object) -> str:
    """A value from the API fit for a log line: printable, at most 64 characters."""
    text = value if isinstance(value, str) else repr(value)
    return "".join(ch if ch.isprintable() else "?" for ch in text[:64])


def ownership(workload: object, job_uid: str) -> Ownership:
    """Whose the existing ``workload`` (the API's JSON) is, for the Job of ``job_uid``: see
    ``Ownership``. Pure; malformed ownerReferences count as none."""
    meta = _object(_object(workload).get("metadata"))
    stamp = being_deleted(workload)
    if stamp:
        return Ownership("wait", f"is being deleted (since {_shown(stamp)})")
    refs = meta.get("ownerReferences")
    refs = [r for r in refs if isinstance(r, dict)] if isinstance(refs, list) else []
    if any(r.get("uid") == job_uid for r in refs):
        return Ownership("ours", "is owned by this Job")
    jobs = [r for r in refs if r.get("kind") == "Job" and r.get("apiVersion") == "batch/v1"]
    if jobs:
        return Ownership("wait", f"belongs to an earlier Job (uid {_shown(jobs[0].get('uid'))}), which the "
                                 "garbage collector deletes it with")
    return Ownership("refuse", "exists and no Job owns it (made by hand, or applied by an earlier deploy/): "
                               "the scaler never adopts workers")


def pod_template(podtemplate: object, name: str) -> dict:
    """The pod template of a PodTemplate (the API's JSON), checked: labels a non-empty map of
    strings (they become the workload's selector) and at least one container; ConfigError
    naming ``name`` otherwise. Pure; returns a copy."""
    template = _object(podtemplate).get("template")
    if not isinstance(template, dict):
        raise ConfigError(f"podtemplates/{name} has no template")
    labels = _object(template.get("metadata")).get("labels")
    if not (isinstance(labels, dict) and labels
            and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise ConfigError(f"podtemplates/{name}: template.metadata.labels must be a non-empty map of strings "
                          "(they select the workers)")
    containers = _object(template.get("spec")).get("containers")
    if not (isinstance(containers, list) and containers):
        raise ConfigError(f"podtemplates/{name}: template.spec.containers is empty")
    return copy.deepcopy(template)


def new_workload(kind: str, name: str, template: dict, owner: dict, replicas: int) -> dict:
    """The apps/v1 workload ``kind``/``name`` to create: ``replicas`` pods of ``template`` (a
    ``pod_template``), selected by all of its labels, owned by ``owner`` from its creation. Pure."""
    labels = dict(template["metadata"]["labels"])
    return {"apiVersion": "apps/v1", "kind": KIND_NAMES[kind],
            "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template}}


class Cluster:
    """The API calls the scaler makes, through the official client (loaded lazily)."""

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

    def _call(self, what: str, fn: Callable, *args, expected: int | None = None, **kwargs) -> object:
        """One API call; its JSON body as it came (not the client's models: they reject
        answers they do not expect with their own errors); None when the API answers the
        ``expected`` error code (404 for a read of what may not exist, 409 for a create).
        LaunchError on any other failure."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = fn(*args, _request_timeout=10, _preload_content=False, **kwargs)
            return json.loads(response.data)
        except ApiException as exc:
            if expected is not None and exc.status == expected:
                return None
            transient = not exc.status or exc.status == 429 or exc.status >= 500
            raise (TransientError if transient else LaunchError)(f"{what}: {exc.status} {exc.reason}") from None
        except (HTTPError, OSError) as exc:
            raise TransientError(f"{what}: {exc}") from None
        except ValueError as exc:
            raise LaunchError(f"{what}: the answer is not JSON ({exc})") from None

    def _apps_call(self, verb: str, kind: str) -> Callable:
        """The client's ``{verb}_namespaced_{kind}`` method (``kind`` a WORKLOAD_KINDS key)."""
        return getattr(self.apps, verb.format(WORKLOAD_KINDS[kind]))

    def workload(self, kind: str, name: str, missing_ok: bool = False) -> object:
        """The workload's JSON (unchecked: see ``being_deleted``, ``ownership``); with
        ``missing_ok``, None when there is none."""
        return self._call(f"read {kind}/{name}", self._apps_call("read_namespaced_{}", kind), name, self.namespace,
                          expected=404 if missing_ok else None)

    def create(self, kind: str, body: dict) -> bool:
        """Create the workload ``body``; False when one of its name exists already (409)."""
        made = self._call(f"create {kind}/{body['metadata']['name']}", self._apps_call("create_namespaced_{}", kind),
                          self.namespace, body, expected=409)
        return made is not None

    def pod_template(self, name: str) -> object:
        """The PodTemplate's JSON (unchecked: see ``pod_template``)."""
        return self._call(f"read podtemplates/{name}", self.core.read_namespaced_pod_template, name, self.namespace)

    def replicas(self, kind: str, name: str) -> object:
        """``spec.replicas`` of the workload's scale (unchecked: see ``start_replicas``)."""
        scale = self._call(f"read {kind}/{name}/scale", self._apps_call("read_namespaced_{}_scale", kind),
                           name, self.namespace)
        spec = scale.get("spec") if isinstance(scale, dict) else None
        return spec.get("replicas") if isinstance(spec, dict) else None

    def scale(self, kind: str, name: str, replicas: int) -> None:
        self._call(f"scale {kind}/{name} to {replicas}", self._apps_call("patch_namespaced_{}_scale", kind),
                   name, self.namespace, {"spec": {"replicas": replicas}})

    def job(self, name: str) -> object:
        """The Job's JSON (unchecked: see ``stop_decision``, ``owner_reference``)."""
        return self._call(f"read job {name}", self.batch.read_namespaced_job, name, self.namespace)

    def record_event(self, body: dict) -> None:
        """Create the core/v1 Event ``body`` in the namespace."""
        self._call(f"record event {body['metadata']['name']}", self.core.create_namespaced_event, self.namespace, body)

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


def _workload(value: str) -> tuple[str, str]:
    kind, sep, name = value.partition("/")
    if not sep or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"not KIND/NAME: {value!r}")
    if kind not in WORKLOAD_KINDS:
        raise argparse.ArgumentTypeError(f"unknown kind {kind!r} (one of {', '.join(sorted(WORKLOAD_KINDS))})")
    return kind, name


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m elastic.scaler.scale_workers",
                description="Set the job's workers to --replicas when a launcher pod starts; scale them "
                            "to zero on SIGTERM once --container of --pod has ended and the Job is over.")
    p.add_argument("--workers", type=_workload, required=True, metavar="KIND/NAME",
                   help="the job's workers: replicasets/NAME, statefulsets/NAME or deployments/NAME")
    p.add_argument("--min-replicas", type=_positive, required=True,
                   help="the floor: workers for --min-np (the PodDisruptionBudget's minAvailable)")
    p.add_argument("--replicas", type=_positive, default=None,
                   help="the desired size: workers for --max-np, set at start (default --min-replicas)")
    p.add_argument("--max-replicas", type=_positive, default=None,
                   help="the cap: a larger size is lowered to it (default --replicas)")
    p.add_argument("--pod", default=None, help="this pod's name (downward API); needed unless --phase start")
    p.add_argument("--container", default="launcher", help="the main container (default launcher)")
    p.add_argument("--job", default=None, help="the launcher Job: read for retries; with --template the "
                                               "workers' owner from their creation")
    p.add_argument("--template", default=None, metavar="PODTEMPLATE",
                   help="make the workers from this PodTemplate, owned by --job, when they do not exist "
                        "(needs --job)")
    p.add_argument("--phase", choices=["start", "stop", "both"], default="both",
                   help="start: size the workers and exit (an init container); stop: wait for SIGTERM "
                        "and decide (the sidecar); both (default)")
    p.add_argument("--namespace", default=None, help="default: the service account's namespace")
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    p.add_argument("--start-timeout", type=_seconds, default=120.0,
                   help="seconds to retry the start-up calls (default 120)")
    p.add_argument("--finish-timeout", type=_seconds, default=45.0,
                   help="seconds after SIGTERM to decide and scale to zero (default 45; below the pod's grace)")
    p.add_argument("--check-every", type=_seconds, default=30.0,
                   help="seconds between checks of the cap while waiting for SIGTERM (default 30)")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The flags, with the sizes' defaults filled in and checked (a usage error otherwise)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.replicas = args.min_replicas if args.replicas is None else args.replicas
    args.max_replicas = args.replicas if args.max_replicas is None else args.max_replicas
    if args.replicas < args.min_replicas:
        parser.error(f"--replicas {args.replicas} is below --min-replicas {args.min_replicas}")
    if args.max_replicas < args.replicas:
        parser.error(f"--max-replicas {args.max_replicas} is below --replicas {args.replicas}")
    if args.phase != "start" and not args.pod:
        parser.error("--pod is required unless --phase start")
    if args.template and not args.job:
        parser.error("--template needs --job (the owner the workers are made with)")
    return args


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


def make_or_keep(cluster: Cluster, args: argparse.Namespace, deadline: float, clock: Callable[[], float],
                 pause: Callable[[float], None]) -> bool:
    """Step 1 with ``--template``: True when it made the workload (at ``--replicas``), False
    when the Job's own is there; WorkloadGone when one is refused or does not go in time."""
    kind, name = args.workers
    owner = owner_reference(retry(lambda: cluster.job(args.job), deadline, clock, pause))
    template: dict | None = None
    while True:
        workload = retry(lambda: cluster.workload(kind, name, missing_ok=True), deadline, clock, pause)
        if workload is None:
            if template is None:
                template = pod_template(retry(lambda: cluster.pod_template(args.template), deadline, clock, pause),
                                        args.template)
            made = functools.partial(cluster.create, kind, new_workload(kind, name, template, owner, args.replicas))
            if retry(made, deadline, clock, pause):
                log.info("%s/%s made from podtemplates/%s with %d replicas, owned by jobs/%s from its creation "
                         "(deleting the Job deletes the workers)", kind, name, args.template, args.replicas, args.job)
                return True
            continue  # made meanwhile: judge that one
        verdict = ownership(workload, owner["uid"])
        if verdict.action == "ours":
            log.info("%s/%s %s: kept as it is", kind, name, verdict.reason)
            return False
        if verdict.action == "refuse":
            raise WorkloadGone(f"{kind}/{name} {verdict.reason}; delete it (kubectl delete {kind} {name}), then "
                               "delete and apply the Job again")
        if clock() >= deadline:
            raise WorkloadGone(f"{kind}/{name} {verdict.reason}, still after {args.start_timeout:.0f} s "
                               f"(--start-timeout): no workers will come; wait until it is gone "
                               f"(kubectl get {kind} {name}), then delete and apply the Job again")
        log.info("%s/%s %s: waiting until it is gone", kind, name, verdict.reason)
        pause(1.0)


def start(cluster: Cluster, args: argparse.Namespace, clock: Callable[[], float],
          pause: Callable[[float], None]) -> None:
    """Step 1 of the module docstring: make the workload owned by the Job or keep the Job's own
    (``--template``), or refuse one being deleted; then size it."""
    kind, name = args.workers
    deadline = clock() + args.start_timeout
    if args.template:
        if make_or_keep(cluster, args, deadline, clock, pause):
            return
    else:
        stamp = being_deleted(retry(lambda: cluster.workload(kind, name), deadline, clock, pause))
        if stamp:
            raise WorkloadGone(f"{kind}/{name} is being deleted (since {_shown(stamp)}): no workers will come; "
                               f"wait until it is gone (kubectl get {kind} {name}), then apply again")
    current = retry(lambda: cluster.replicas(kind, name), deadline, clock, pause)
    wanted = start_replicas(current, args.replicas, args.max_replicas)
    if wanted is not None:
        retry(lambda: cluster.scale(kind, name, wanted), deadline, clock, pause)
        log.info("%s/%s scaled to %d (was %s)", kind, name, wanted, current)
    else:
        log.info("%s/%s has %s replicas, between --replicas %d and --max-replicas %d: kept", kind, name,
                 current, args.replicas, args.max_replicas)


def hold_the_cap(cluster: Cluster, args: argparse.Namespace) -> None:
    """Step 2's check: lower the workers to ``--max-replicas`` when above; an API error is
    logged (the next check tries again)."""
    kind, name = args.workers
    try:
        wanted = capped_replicas(cluster.replicas(kind, name), args.max_replicas)
        if wanted is not None:
            cluster.scale(kind, name, wanted)
            log.info("%s/%s lowered to --max-replicas %d (more workers than --max-np can use)", kind, name, wanted)
    except LaunchError as exc:
        log.warning("%s (checking the cap again later)", exc)


def stop(cluster: Cluster, args: argparse.Namespace, clock: Callable[[], float],
         pause: Callable[[float], None]) -> None:
    """Step 3 of the module docstring, after the stop signal."""
    kind, name = args.workers
    deadline = clock() + args.finish_timeout
    pod: object = None
    job: object = None
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
    _record_end(cluster, pod, job, args.container)
    if decision.action == "zero":
        retry(lambda: cluster.scale(kind, name, 0), deadline, clock, pause)
        log.info("%s: %s/%s scaled to 0", decision.reason, kind, name)
    elif decision.action == "keep":
        log.info("%s", decision.reason)
    else:
        log.warning("%s after %.0f s: the workers are left as they are", decision.reason, args.finish_timeout)


def _record_end(cluster: Cluster, pod: object, job: object, container: str) -> None:
    """Record how the launcher ended as an Event on its Job (``failure_event``); a failure to
    record it is logged, never more: the workers' size matters more."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = failure_event(pod, container, job, now, secrets.token_hex(8))
    if body is None:
        return
    try:
        cluster.record_event(body)
        log.info("recorded on the Job: %s %s: %s", body["type"], body["reason"], body["message"])
    except LaunchError as exc:
        log.warning("%s: the Job shows no event for the launcher's end", exc)


def run(args: argparse.Namespace, wait_for_stop: Callable[[float], int | None], clock=time.monotonic,
        pause: Callable[[float], None] = time.sleep) -> int:
    """Start, wait in ``wait_for_stop(seconds)`` (the signal, or None when the time passed:
    check the cap and wait again), then act on the decision; per ``--phase``."""
    cluster = Cluster(_namespace(args), args.kubeconfig)
    cluster.connect()
    if args.phase in ("start", "both"):
        start(cluster, args, clock, pause)
    if args.phase == "start":
        return EXIT_OK
    while (signum := wait_for_stop(args.check_every)) is None:
        hold_the_cap(cluster, args)
    log.info("stopped by signal %d", signum)
    stop(cluster, args, clock, pause)
    return EXIT_OK


def _block_and_wait() -> Callable[[float], int | None]:
    """Block SIGTERM/SIGINT now (none is lost during start-up); the returned call waits up to
    its argument's seconds for one: its number, or None."""
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait(seconds: float) -> int | None:
        info = signal.sigtimedwait(signals, seconds)
        return None if info is None else info.si_signo

    return wait


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="worker-scaler: %(message)s")
    # the stop phases block the signals now: one that comes during start-up is not lost
    wait_for_stop = _block_and_wait() if args.phase != "start" else (lambda _seconds: signal.SIGTERM)
    return run_main("worker-scaler", lambda: run(args, wait_for_stop), usage=ConfigError, failure=ElasticError)


if __name__ == "__main__":
    sys.exit(main())
