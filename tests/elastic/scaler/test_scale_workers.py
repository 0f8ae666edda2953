"""The worker scaler: at start refuses a workload being deleted and sets the workers to the
desired size (what --max-np needs), within the cap (making them owned by the Job from birth:
tests/elastic/scaler/test_owner_from_birth.py, on the local cluster);
holds the cap while the job runs; on SIGTERM scales them to zero when the Job is over (exit 0
or 2, the last try, a deletion on the last try) or suspended, keeps them for a retry and when
the pod was disrupted; retries API calls.

The process tests run the module as the kubelet would (its own process, SIGTERM) with the
official client; the API is a small HTTP server in the test that answers the calls and
records them, so a test sets any pod or Job status it needs (the scaler against the local
cluster's ReplicaSets, PodTemplates and Jobs: tests/elastic/scaler/test_owner_from_birth.py and
tests/e2e/test_grows_to_max_np.py)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from elastic.errors import ConfigError, LaunchError
from elastic.scaler.scale_workers import (
    being_deleted,
    capped_replicas,
    failure_event,
    new_workload,
    owner_reference,
    ownership,
    pod_template,
    start_replicas,
    stop_decision,
)
from tests.waiting import wait_for

NS = "jobs"
STS = "elastic-horovod-worker"
POD = "elastic-horovod-launcher-abcde"
JOB = "elastic-horovod-launcher"
JOB_UID = "0f3c1a2e-8a7e-4c55-9d0a-3b1f2c4d5e6f"


def job_json(failed: int | None = None, backoff_limit: int | None = 3, suspend: bool | None = None) -> dict:
    spec: dict = {} if backoff_limit is None else {"backoffLimit": backoff_limit}
    if suspend is not None:
        spec["suspend"] = suspend
    status = {} if failed is None else {"failed": failed}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NS, "uid": JOB_UID},
            "spec": spec, "status": status}




def pod_json(*, launcher_state: dict | None = None, deleting: bool = False, disrupted: bool = False) -> dict:
    statuses = [{"name": "launcher", "state": launcher_state or {"running": {}}}]
    meta = {"name": POD, "namespace": NS}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict = {"containerStatuses": statuses}
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status}


def ended(code: int, **kw) -> dict:
    return pod_json(launcher_state={"terminated": {"exitCode": code}}, **kw)


# ---- pure logic --------------------------------------------------------------------------

@pytest.mark.parametrize("current,expected", [(None, 2), (0, 2), (1, 2), (2, None), (5, 2),
                                              ("3", 2), (True, 2), (-1, 2)])
def test_start_sets_the_desired_size_when_there_is_no_cap_above_it(current, expected):
    assert start_replicas(current, 2) == expected


@pytest.mark.parametrize("current,expected", [(None, 8), (0, 8), (1, 8), (2, 8), (7, 8), (8, None), (10, None),
                                              (12, None), (13, 12), (100, 12), ("9", 8)])
def test_start_grows_to_what_max_np_needs_and_cuts_to_the_cap(current, expected):
    """A job of --max-np 8 on 1-GPU workers asks for 8 workers, not the floor
    of 2 (the old start raised them to the floor only); a size up to the cap is kept."""
    assert start_replicas(current, 8, 12) == expected


@pytest.mark.parametrize("current,expected", [(None, None), (3, None), (4, None), (5, 4), ("9", None), (True, None)])
def test_the_cap_lowers_only_a_count_above_it(current, expected):
    assert capped_replicas(current, 4) == expected


@pytest.mark.parametrize("workload,expected", [
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, "2026-01-01T00:00:00Z"),
    ({"metadata": {}}, None), ({"metadata": {"deletionTimestamp": ""}}, None), ({"metadata": None}, None),
    (None, None), ([], None)])
def test_being_deleted_reads_the_deletion_timestamp_only(workload, expected):
    assert being_deleted(workload) == expected


@pytest.mark.parametrize("code,job", [(0, None), (0, job_json(failed=0)), (2, None), (2, job_json(failed=0)),
                                      (75, None), (75, job_json(failed=0))])  # 75: no capacity (elastic.launch.gang)
def test_done_or_bad_input_means_zero_whatever_the_retries(code, job):
    decision = stop_decision(ended(code), "launcher", job)
    assert decision.action == "zero" and f"exit code {code}" in decision.reason


@pytest.mark.parametrize("code", [1, 137, 143])
@pytest.mark.parametrize("failed,limit,action", [(None, 3, "keep"), (0, 3, "keep"), (2, 3, "keep"), (3, 3, "zero"),
                                                 (5, None, "keep"), (6, None, "zero"), (0, 0, "zero")])
def test_a_failure_keeps_the_workers_for_a_retry_and_zeroes_them_on_the_last_try(code, failed, limit, action):
    decision = stop_decision(ended(code), "launcher", job_json(failed=failed, backoff_limit=limit))
    assert decision.action == action, decision


@pytest.mark.parametrize("job", [None, "x", {"spec": []}])
def test_a_failure_with_the_job_unknown_keeps_the_workers(job):
    assert stop_decision(ended(1), "launcher", job).action == "keep"


@pytest.mark.parametrize("failed", [0, 3, 9])
def test_a_fenced_launcher_keeps_the_workers_for_the_leader_even_past_the_limit(failed):
    """Exit 76: another launcher pod of the Job took the Lease and leads; the Job ignores this
    exit, so it is never the last try: zeroing would end the new leader's world."""
    decision = stop_decision(ended(76), "launcher", job_json(failed=failed))
    assert decision.action == "keep" and "fenced" in decision.reason


def with_status(job: dict, **status) -> dict:
    return {**job, "status": {**job["status"], **status}}


@pytest.mark.parametrize("code,failed,status,action", [
    # another launcher pod ended a moment ago, not counted yet: with this one the Job is over
    (1, 2, {"uncountedTerminatedPods": {"failed": ["uid-standby"]}}, "zero"),
    (1, 1, {"uncountedTerminatedPods": {"failed": ["uid-standby"]}}, "keep"),
    # a leader's exit 1 with a standby running: one failure, the standby leads: kept
    (1, 2, {"active": 2}, "keep"),
    (143, 2, {"active": 2}, "keep"),
    # 69 is a verdict: the standby exits 69 too, two failures for the Job
    (69, 2, {"active": 2}, "zero"),
    (69, 1, {"active": 2}, "keep"),
    (69, 2, {"active": 1}, "keep"),
    (69, 2, {"active": "2"}, "keep"),
    (69, 2, {"uncountedTerminatedPods": {"failed": "x"}}, "keep"),
])
def test_the_last_try_counts_the_other_launcher_pods_failures(code, failed, status, action):
    """Two launcher pods (leader and standby) can fail together: the scaler that decides last
    must zero the workers of a Job that fails, or they hold their GPUs until the Job is deleted."""
    job = with_status(job_json(failed=failed, backoff_limit=3), **status)
    decision = stop_decision(ended(code), "launcher", job)
    assert decision.action == action, decision


def test_a_disrupted_pod_keeps_the_workers_even_on_the_last_try():
    decision = stop_decision(ended(137, disrupted=True), "launcher", job_json(failed=3))
    assert decision.action == "keep" and "TerminationByKubelet" in decision.reason


def test_owner_reference_names_the_job_blocks_its_deletion_and_rejects_one_without_a_uid():
    """blockOwnerDeletion: a foreground delete of the Job waits until the workers are gone;
    controller: the Job is the workers' one managing owner."""
    assert owner_reference(job_json()) == {"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID,
                                           "controller": True, "blockOwnerDeletion": True}
    with pytest.raises(LaunchError):
        owner_reference({"metadata": {"name": JOB}})


def with_owners(refs: object, deleting: bool = False) -> dict:
    meta: dict = {"name": STS, "ownerReferences": refs}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID}


@pytest.mark.parametrize("workload,action", [
    (with_owners([JOB_REF]), "ours"),
    (with_owners([{"kind": "Other", "uid": "x"}, JOB_REF]), "ours"),
    (with_owners([JOB_REF], deleting=True), "wait"),  # ours, but going: a new one is made after it
    (with_owners([{**JOB_REF, "uid": "an-earlier-job"}]), "wait"),  # the garbage collector takes it
    (with_owners(None), "refuse"), (with_owners([]), "refuse"), (with_owners("x"), "refuse"),
    (with_owners([None, {"kind": "Job", "apiVersion": "v1", "uid": "y"}]), "refuse"),
    (with_owners([{"apiVersion": "apps/v1", "kind": "Deployment", "uid": "z"}]), "refuse"),
    ({}, "refuse"), (None, "refuse"),
])
def test_ownership_keeps_only_the_jobs_own_waits_for_what_goes_and_refuses_the_ownerless(workload, action):
    assert ownership(workload, JOB_UID).action == action


def test_ownership_shows_what_the_api_said_printable_and_short():
    verdict = ownership(with_owners([{**JOB_REF, "uid": "\x1b[31m" + "u" * 200}]), JOB_UID)
    assert verdict.action == "wait" and "\x1b" not in verdict.reason and "u" * 65 not in verdict.reason


TEMPLATE = {"metadata": {"labels": {"app": "w", "role": "worker"}},
            "spec": {"containers": [{"name": "worker", "image": "i"}]}}


@pytest.mark.parametrize("podtemplate,message", [
    (None, "has no template"), ({"template": []}, "has no template"),
    ({"template": {"spec": TEMPLATE["spec"]}}, "labels must be"),
    ({"template": {"metadata": {"labels": {}}, "spec": TEMPLATE["spec"]}}, "labels must be"),
    ({"template": {"metadata": {"labels": {"app": 1}}, "spec": TEMPLATE["spec"]}}, "labels must be"),
    ({"template": {"metadata": TEMPLATE["metadata"], "spec": {"containers": []}}}, "containers is empty"),
    ({"template": {"metadata": TEMPLATE["metadata"]}}, "containers is empty"),
])
def test_a_pod_template_without_labels_or_containers_is_bad_input(podtemplate, message):
    with pytest.raises(ConfigError, match=message):
        pod_template(podtemplate, "w")


def test_the_workload_made_is_owned_from_birth_and_selects_its_templates_labels():
    made = new_workload("replicasets", STS, pod_template({"template": TEMPLATE}, "w"), owner_reference(job_json()), 3)
    assert made == {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": STS, "labels": TEMPLATE["metadata"]["labels"],
                                 "ownerReferences": [owner_reference(job_json())]},
                    "spec": {"replicas": 3, "selector": {"matchLabels": TEMPLATE["metadata"]["labels"]},
                             "template": TEMPLATE}}


def test_a_pod_being_deleted_with_tries_left_keeps_the_workers():
    pod = pod_json(launcher_state={"terminated": {"exitCode": 143}}, deleting=True)
    assert stop_decision(pod, "launcher").action == "keep"
    assert stop_decision(pod, "launcher", job_json(failed=1)).action == "keep"


def test_a_kubectl_delete_of_the_pod_on_the_last_try_frees_the_workers():
    """A deleted pod has no DisruptionTarget, so the Job counts it as a
    failure; on the last try the Job fails and nothing would free the GPUs but the 24 h TTL
    (the old decision kept the workers for any pod being deleted)."""
    pod = pod_json(launcher_state={"terminated": {"exitCode": 143}}, deleting=True)
    decision = stop_decision(pod, "launcher", job_json(failed=3))
    assert decision.action == "zero" and "last try" in decision.reason


def test_a_pod_being_deleted_before_the_launcher_ended_waits_for_its_exit():
    assert stop_decision(pod_json(deleting=True), "launcher", job_json(failed=3)).action == "wait"


@pytest.mark.parametrize("pod", [pod_json(), pod_json(deleting=True), ended(1, disrupted=True), ended(1)])
def test_a_suspended_job_frees_the_workers_whatever_the_pod(pod):
    """Kueue (or `kubectl patch job --suspend`) suspends the Job and its
    controller deletes the pod; the workers must not hold their GPUs until it resumes."""
    decision = stop_decision(pod, "launcher", job_json(failed=0, suspend=True))
    assert decision.action == "zero" and "suspended" in decision.reason
    assert stop_decision(ended(1), "launcher", job_json(failed=0, suspend=False)).action == "keep"


@pytest.mark.parametrize("pod", [None, [], {}, {"status": None}, {"status": {"containerStatuses": "x"}},
                                 {"status": {"containerStatuses": [None, {"name": "launcher", "state": []}]}},
                                 pod_json(), pod_json(launcher_state={"waiting": {}})])
def test_anything_else_is_wait(pod):
    assert stop_decision(pod, "launcher").action == "wait"


def test_another_containers_end_is_not_the_launchers():
    pod = pod_json()
    pod["status"]["containerStatuses"].append({"name": "discovery-daemon", "state": {"terminated": {"exitCode": 0}}})
    assert stop_decision(pod, "launcher").action == "wait"


# ---- the process -------------------------------------------------------------------------

class StandIn:
    """GET/PATCH replicasets/STS/scale, GET replicasets/STS, GET jobs/JOB, GET pods/POD and POST
    events in namespace NS; records scale patches and events; the first ``fail_scales`` answer 500; any other
    write is refused (403, as the scaler's Role does); ``deleting`` puts a deletionTimestamp on
    the ReplicaSet."""

    def __init__(self, replicas, pod: dict, job: dict | None = None, fail_scales: int = 0,
                 deleting: bool = False):
        self.replicas = replicas
        self.pod = pod
        self.job = job
        self.fail_scales = fail_scales
        self.deleting = deleting
        self.patches: list[int] = []
        self.refused: list[str] = []
        self.events: list[dict] = []  # the Events created
        self.pod_reads = 0
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _scale(self):
                spec = {} if stand_in.replicas is None else {"replicas": stand_in.replicas}
                return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                        "metadata": {"name": STS, "namespace": NS}, "spec": spec}

            def do_GET(self):
                if self.path.startswith(f"/apis/apps/v1/namespaces/{NS}/replicasets/{STS}/scale"):
                    return self._send(200, self._scale())
                if self.path.split("?")[0] == f"/apis/apps/v1/namespaces/{NS}/replicasets/{STS}":
                    meta = {"name": STS, "namespace": NS}
                    if stand_in.deleting:
                        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                    return self._send(200, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta})
                if self.path.startswith(f"/api/v1/namespaces/{NS}/pods/{POD}"):
                    stand_in.pod_reads += 1
                    return self._send(200, stand_in.pod)
                if self.path.startswith(f"/apis/batch/v1/namespaces/{NS}/jobs/{JOB}") and stand_in.job:
                    return self._send(200, stand_in.job)
                self._send(404, {"kind": "Status", "code": 404})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.split("?")[0] == f"/api/v1/namespaces/{NS}/events":
                    stand_in.events.append(body)
                    return self._send(201, body)
                stand_in.refused.append(self.path)
                self._send(403, {"kind": "Status", "code": 403})

            def do_PATCH(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.startswith(f"/apis/apps/v1/namespaces/{NS}/replicasets/{STS}/scale"):
                    if stand_in.fail_scales > 0:
                        stand_in.fail_scales -= 1
                        return self._send(500, {"kind": "Status", "code": 500})
                    stand_in.replicas = body["spec"]["replicas"]
                    stand_in.patches.append(stand_in.replicas)
                    return self._send(200, self._scale())
                stand_in.refused.append(self.path)
                self._send(403, {"kind": "Status", "code": 403})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path) -> str:
        port = self.server.server_address[1]
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}],
        }))
        return str(path)


def start(kubeconfig: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "elastic.scaler.scale_workers", "--workers", f"replicasets/{STS}", "--min-replicas",
         "2", "--pod", POD, "--namespace", NS, "--kubeconfig", kubeconfig, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_raises_at_start_and_scales_to_zero_when_the_launcher_has_ended(tmp_path):
    with StandIn(replicas=1, pod=pod_json()) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"))
        try:
            wait_for(lambda: api.patches == [2], 60, "the start-up scale to 2")
            # the kubelet stops the sidecar after the launcher ended; the status may lag behind
            proc.send_signal(signal.SIGTERM)
            wait_for(lambda: api.pod_reads >= 2, 60, "the scaler to read its pod again")
            api.pod = pod_json(launcher_state={"terminated": {"exitCode": 0}})
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert api.patches == [2, 0]
    assert "launcher ended with exit code 0" in err


def started(proc: subprocess.Popen) -> bool:
    return proc.stderr is not None and proc.stderr.readline().startswith("worker-scaler: replicasets/")


@pytest.mark.slow
def test_a_retry_keeps_the_workers_and_their_size(tmp_path):
    with StandIn(replicas=3, pod=ended(1), job=job_json(failed=1)) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--job", JOB, "--max-replicas", "4")
        try:
            wait_for(lambda: started(proc), 60, "the start-up line")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert api.refused == [], "the scaler writes nothing but the scale and the event"
    assert api.patches == [] and api.replicas == 3, err  # a size the user set survives the retry
    assert "the Job tries again" in err
    # the launcher's end recorded on the Job
    assert [(e["reason"], e["involvedObject"]["uid"], e["message"]) for e in api.events] == [
        ("LauncherFailed", JOB_UID, "launcher exited 1")]
    assert "recorded on the Job: Warning LauncherFailed" in err


@pytest.mark.slow
def test_the_last_try_scales_to_zero_through_api_errors(tmp_path):
    with StandIn(replicas=2, pod=ended(137), job=job_json(failed=3), fail_scales=2) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--job", JOB)
        try:
            wait_for(lambda: started(proc), 60, "the start-up line")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert api.patches == [0], err
    assert "500" in err and "the Job's last try" in err


@pytest.mark.slow
def test_a_larger_size_is_kept_and_a_deleted_pod_keeps_its_workers(tmp_path):
    pod = pod_json(launcher_state={"terminated": {"exitCode": 143}}, deleting=True)
    with StandIn(replicas=4, pod=pod) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--max-replicas", "4")
        try:
            wait_for(lambda: started(proc), 60, "the start-up line")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert api.patches == [] and api.replicas == 4
    assert "may try again (not known)" in err  # without --job: kept


@pytest.mark.slow
def test_the_start_phase_grows_the_workers_to_what_max_np_needs_and_exits(tmp_path):
    """Started with the floor 2 (a new ReplicaSet has 1), the workers are set
    to --replicas 4; the init container then exits 0 without waiting for a signal."""
    with StandIn(replicas=1, pod=pod_json(), job=job_json(failed=0)) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--replicas", "4", "--phase", "start", "--job", JOB)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert api.patches == [4] and api.refused == [] and api.pod_reads == 0


@pytest.mark.slow
def test_a_workload_being_deleted_fails_the_start_at_once_with_exit_2(tmp_path):
    """A re-apply right after a delete patches the ReplicaSet being deleted;
    the start refuses it in one line (exit 2: the Job's podFailurePolicy fails the Job) instead
    of owning and scaling an object that is about to disappear."""
    with StandIn(replicas=2, pod=pod_json(), job=job_json(failed=0), deleting=True) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--replicas", "4", "--phase", "start", "--job", JOB)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1].startswith(f"error: replicasets/{STS} is being deleted (since ")
    assert "Traceback" not in err and api.patches == [] and api.refused == []


@pytest.mark.slow
def test_the_sidecar_lowers_a_size_above_the_cap_while_it_waits(tmp_path):
    """Pods beyond what --max-np can use would be prepared, synced and idle: someone scales to
    9, the sidecar (stop phase: no start-up scale) lowers it to --max-replicas 5."""
    with StandIn(replicas=4, pod=pod_json(), job=job_json(failed=0)) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--replicas", "4", "--max-replicas", "5",
                     "--phase", "stop", "--job", JOB, "--check-every", "0.2")
        try:
            api.replicas = 9
            wait_for(lambda: api.patches == [5], 60, "the scale down to the cap")
            api.pod = ended(0)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert api.patches == [5, 0] and api.refused == [], err


@pytest.mark.slow
def test_a_suspended_job_scales_the_workers_to_zero(tmp_path):
    with StandIn(replicas=4, pod=pod_json(deleting=True), job=job_json(failed=0, suspend=True)) as api:
        proc = start(api.kubeconfig(tmp_path / "kubeconfig"), "--replicas", "4", "--job", JOB)
        try:
            wait_for(lambda: started(proc), 60, "the start-up line")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert api.patches == [0] and "suspended" in err


@pytest.mark.slow
def test_an_api_error_is_one_line_and_exit_1(tmp_path):
    with StandIn(replicas=1, pod=pod_json()) as api:
        config = api.kubeconfig(tmp_path / "kubeconfig")
        proc = subprocess.run(
            [sys.executable, "-m", "elastic.scaler.scale_workers", "--workers", "replicasets/other",
             "--min-replicas", "2", "--pod", POD, "--namespace", NS, "--kubeconfig", config],
            capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "error: read replicasets/other: 404 Not Found"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["--min-replicas", "0", "--workers", "replicasets/s", "--pod", "p"], "must be at least 1"),
    (["--min-replicas", "2", "--pod", "p"], "--workers"),
    (["--min-replicas", "2", "--workers", "s", "--pod", "p"], "not KIND/NAME"),
    (["--min-replicas", "2", "--workers", "jobs/s", "--pod", "p"], "unknown kind 'jobs'"),
    (["--min-replicas", "3", "--replicas", "2", "--workers", "replicasets/s", "--pod", "p"],
     "--replicas 2 is below --min-replicas 3"),
    (["--min-replicas", "2", "--replicas", "4", "--max-replicas", "3", "--workers", "replicasets/s", "--pod", "p"],
     "--max-replicas 3 is below --replicas 4"),
    (["--min-replicas", "2", "--workers", "replicasets/s"], "--pod is required unless --phase start"),
    (["--min-replicas", "2", "--workers", "replicasets/s", "--phase", "start", "--template", "t"],
     "--template needs --job"),
    (["--min-replicas", "2", "--workers", "replicasets/s", "--pod", "p", "--namespace", "n",
      "--kubeconfig", "/nonexistent/kubeconfig"], "no cluster configuration"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = subprocess.run([sys.executable, "-m", "elastic.scaler.scale_workers", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_a_job_past_its_deadline_frees_the_workers_though_tries_are_left():
    """activeDeadlineSeconds: the Job controller marks the Job and stops its pod (143); the
    workers must not wait for the Job's TTL to go."""
    over = job_json(failed=0)
    over["status"]["conditions"] = [{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}]
    decision = stop_decision(ended(143), "launcher", over)
    assert decision.action == "zero" and "FailureTarget: DeadlineExceeded" in decision.reason
    over["status"]["conditions"] = [{"type": "Failed", "status": "False"}]
    assert stop_decision(ended(143), "launcher", over).action == "keep"


def test_workers_failing_is_a_counted_failure_that_keeps_the_workers_for_a_retry():
    from shared.exitcodes import EXIT_WORKERS_FAILING

    assert stop_decision(ended(EXIT_WORKERS_FAILING), "launcher", job_json(failed=1)).action == "keep"
    assert stop_decision(ended(EXIT_WORKERS_FAILING), "launcher", job_json(failed=3)).action == "zero"


# ---- the launcher's end as an Event on the Job -------------------------------------------

def test_workers_failing_is_a_warning_event_on_the_job_with_the_launchers_last_line():
    from shared.exitcodes import EXIT_WORKERS_FAILING

    tail = "training...\nelastic-run: the first world did not form: worker-1 failing (CrashLoopBackOff)\n\n"
    pod = pod_json(launcher_state={"terminated": {"exitCode": EXIT_WORKERS_FAILING, "message": tail}})
    event = failure_event(pod, "launcher", job_json(), "2026-11-29T07:00:00Z", "abc")
    assert event is not None
    assert event["involvedObject"] == {"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID,
                                       "namespace": NS}
    assert (event["type"], event["reason"]) == ("Warning", "WorkersFailing")
    assert event["message"] == (f"launcher exited {EXIT_WORKERS_FAILING}: elastic-run: the first world did not "
                                "form: worker-1 failing (CrashLoopBackOff)")
    assert event["metadata"]["name"] == f"{JOB}.abc" and event["lastTimestamp"] == "2026-11-29T07:00:00Z"


def test_other_ends_get_their_own_reason_and_a_clean_end_none():
    from shared.exitcodes import EXIT_NO_CAPACITY

    def reason(code: int, message=None):
        state = {"terminated": {"exitCode": code, **({"message": message} if message is not None else {})}}
        event = failure_event(pod_json(launcher_state=state), "launcher", job_json(), "t", "x")
        return None if event is None else (event["type"], event["reason"], event["message"])

    assert reason(EXIT_NO_CAPACITY, "waited") == ("Normal", "NoCapacity", f"launcher exited {EXIT_NO_CAPACITY}: waited")
    assert reason(1) == ("Warning", "LauncherFailed", "launcher exited 1")
    assert reason(1, "bad\x1b[31m line " + "x" * 2000)[2].startswith("launcher exited 1: bad?[31m line xxx")
    assert len(reason(1, "x" * 5000)[2]) <= 1024 + len("launcher exited 1: ")
    assert reason(0) is None
    assert failure_event(pod_json(), "launcher", job_json(), "t", "x") is None  # still running
    assert failure_event(ended(1), "launcher", None, "t", "x") is None  # no Job known: nowhere to record it
    assert failure_event(ended(1), "launcher", {"metadata": {"name": JOB}}, "t", "x") is None  # no uid
    assert failure_event("nonsense", "launcher", job_json(), "t", "x") is None
