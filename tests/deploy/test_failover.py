"""Launcher failover as deploy/ renders it (deploy/README.md, "Launcher failover"): the launcher
Job runs a leader and a warm standby, on two nodes when it can; both pods' elastic-run and
discovery-daemon name the same Lease (the Job's) and each pod's own identity (as env, so an
overlay that replaces the args keeps them), taken by the programs' own parsers; the Role
grants the Lease verbs the elector and the gate call, no more; a fenced launcher is not a
failure of the Job."""
from __future__ import annotations

import re

import pytest

from elastic.launch import cli as launch_cli
from shared.exitcodes import EXIT_FENCED, EXIT_WORKERS_FAILING
from tests.deploy.render import DEPLOY, ROOT, by_kind, config_maps, container, expand, one, pod_labels, pod_spec, render

POD_NAME = "elastic-horovod-launcher-x7k2p"
OTHER_POD = "elastic-horovod-launcher-q9m4d"
# the client method -> the RBAC verb it needs
VERBS = {"read": "get", "create": "create", "replace": "update", "patch": "patch", "delete": "delete",
         "list": "list"}


@pytest.fixture(scope="module")
def base() -> list:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def example() -> list:
    return render(DEPLOY / "overlays" / "example")


def expanded_env(objects: list, name: str, pod_name: str = POD_NAME) -> dict[str, str]:
    """A launcher pod container's env values, ``$(VAR)`` expanded as the kubelet does for the
    pod ``pod_name`` of the rendered Job."""
    job = one(objects, "Job")
    c = container(pod_spec(job), name)
    return {e["name"]: expand(f"$({e['name']})", c, pod_labels(job), config_maps(objects), pod_name=pod_name,
                              namespace=job["metadata"]["namespace"]) for e in c.get("env", [])}


def test_the_job_runs_a_leader_and_a_standby_and_no_pod_after_a_success(base):
    """parallelism 2 with completions unset: two pods at once, and once one succeeded the Job
    makes no new pod (an Indexed Job would remake a succeeded index's lost standby, which
    would read the finished Lease as an earlier run and train again)."""
    spec = one(base, "Job")["spec"]
    assert spec["parallelism"] == 2
    assert "completions" not in spec and spec.get("completionMode", "NonIndexed") == "NonIndexed"


def test_workers_failing_keeps_its_retries_though_both_pods_count(base):
    """Exit 69 is a verdict both pods exit with: two failures a try. backoffLimit keeps 69's
    three retries (the Job fails when its failures exceed the limit)."""
    spec = one(base, "Job")["spec"]
    failures_per_try = 2
    tries = spec["backoffLimit"] // failures_per_try + 1
    assert tries == 4
    for rule in spec["podFailurePolicy"]["rules"]:
        assert EXIT_WORKERS_FAILING not in rule.get("onExitCodes", {}).get("values", []), rule


def test_a_fenced_launcher_is_not_a_failure_of_the_job(base):
    rules = one(base, "Job")["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onExitCodes": {"containerName": "launcher", "operator": "In",
                                                "values": [EXIT_FENCED]}} in rules
    assert not any(EXIT_FENCED in r.get("onExitCodes", {}).get("values", []) for r in rules
                   if r["action"] != "Ignore")


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items()) and set(selector) == {"matchLabels"}


@pytest.mark.parametrize("which", ["base", "example"])
def test_the_two_pods_prefer_the_node_of_their_readwriteonce_dataset_claim(which, base, example):
    """The dataset claim is ReadWriteOnce (only one node's pods may mount it: a standby on another
    node would hang in Multi-Attach), so the two pods prefer one node: a preferred affinity on
    the host name, selecting this Job's launcher pods and not another job's (the example
    overlay's job label, renamed by kustomize) nor the workers; no anti-affinity."""
    mine, theirs = (base, example) if which == "base" else (example, base)
    job = one(mine, "Job")
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod_spec(job)["volumes"] if "persistentVolumeClaim" in v]
    assert any(c.endswith("elastic-horovod-datasets") for c in claims), claims
    [dataset] = [c for c in render(DEPLOY / "storage") if c["metadata"]["name"] == "elastic-horovod-datasets"]
    assert dataset["spec"]["accessModes"] == ["ReadWriteOnce"], "not RWO: the anti-affinity of two nodes would do"
    assert "podAntiAffinity" not in pod_spec(job)["affinity"]
    anti = pod_spec(job)["affinity"]["podAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    [term] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = term["podAffinityTerm"]["labelSelector"]
    assert selects(selector, pod_labels(job))
    assert not selects(selector, pod_labels(one(theirs, "Job")))
    assert not selects(selector, pod_labels(one(mine, "PodTemplate")))


@pytest.mark.parametrize("which", ["base", "example", "imagenet"])
def test_the_launcher_and_its_daemon_name_the_jobs_lease_and_the_pods_identity(which, base, example, monkeypatch):
    """elastic-run's ELASTIC_LEADER_ELECTION/LEASE/IDENTITY (its --leader-election,
    --leader-lease, --leader-identity) and discovery-daemon's
    DISCOVERY_PREPARE_LEADER_LEASE/IDENTITY, expanded for one pod, are the same NAMESPACE/<Job
    name> and the pod's name, and each program takes them; set as env, they stay in an
    overlay that replaces the containers' args (the ImageNet one)."""
    from discovery.environment import DISCOVERY_PREPARE_LEADER_IDENTITY, DISCOVERY_PREPARE_LEADER_LEASE
    from discovery.leader_gate import check_identity, parse_lease
    from elastic.environment import ELASTIC_LEADER_ELECTION, ELASTIC_LEADER_IDENTITY, ELASTIC_LEADER_LEASE

    objects = {"base": base, "example": example}.get(which) or render(DEPLOY / "overlays" / which)
    job = one(objects, "Job")
    namespace, job_name = job["metadata"]["namespace"], job["metadata"]["name"]
    launcher, daemon = expanded_env(objects, "launcher"), expanded_env(objects, "discovery-daemon")
    assert launcher[ELASTIC_LEADER_ELECTION] == "1"
    lease = launcher[ELASTIC_LEADER_LEASE]
    assert lease == daemon[DISCOVERY_PREPARE_LEADER_LEASE] == f"{namespace}/{job_name}"
    assert launcher[ELASTIC_LEADER_IDENTITY] == daemon[DISCOVERY_PREPARE_LEADER_IDENTITY] == POD_NAME
    # the other pod of the Job: the same Lease, its own identity
    other = expanded_env(objects, "launcher", OTHER_POD)
    assert other[ELASTIC_LEADER_LEASE] == lease and other[ELASTIC_LEADER_IDENTITY] == OTHER_POD
    # no flag in the args overrides them
    for name in ("launcher", "discovery-daemon"):
        args = container(pod_spec(job), name)["args"]
        assert not [a for a in args if a.startswith(("--leader-", "--prepare-leader-"))], args

    # elastic-run's election settings from the container's env and args, as in the pod
    for key in (ELASTIC_LEADER_ELECTION, ELASTIC_LEADER_LEASE, ELASTIC_LEADER_IDENTITY):
        monkeypatch.setenv(key, launcher[key])
    argv = container(pod_spec(job), "launcher")["args"]
    args = launch_cli.build_parser().parse_args(argv[1:argv.index("--")])
    settings = launch_cli.election_from_args(args, "ignored-namespace", "a-job-id", None)
    assert settings is not None
    assert (settings.namespace, settings.name, settings.identity) == (namespace, job_name, POD_NAME)
    assert settings.timings.lease_duration <= 30  # the standby's takeover: the Lease's duration
    # discovery-daemon's
    assert parse_lease(daemon[DISCOVERY_PREPARE_LEADER_LEASE]) == (namespace, job_name)
    assert check_identity(daemon[DISCOVERY_PREPARE_LEADER_IDENTITY]) == POD_NAME


def lease_verbs(*sources: str) -> set[str]:
    """The RBAC verbs of the ``*_namespaced_lease`` calls in these source files."""
    found = set()
    for source in sources:
        text = (ROOT / source).read_text()
        found |= {VERBS[m] for m in re.findall(r"\b([a-z]+)_namespaced_lease\b", text)}
    return found


@pytest.mark.parametrize("which", ["base", "example"])
def test_the_role_grants_the_lease_calls_made_and_names_the_jobs_lease(which, base, example):
    """get and update (the elector's read and replace, the gate's read) on this Job's Lease
    only; create, which RBAC cannot limit by name, on leases; nothing else on leases; bound to
    the launcher pod's account."""
    objects = base if which == "base" else example
    job = one(objects, "Job")
    used = lease_verbs("elastic/leader/elector.py", "discovery/leader_gate.py")
    assert used == {"get", "create", "update"}
    rules = [r for role in by_kind(objects, "Role") for r in role["rules"] if "leases" in r["resources"]]
    named = [r for r in rules if "resourceNames" in r]
    unnamed = [r for r in rules if "resourceNames" not in r]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"] for r in rules)
    assert [r["resourceNames"] for r in named] == [[job["metadata"]["name"]]]
    assert set(named[0]["verbs"]) == used - {"create"}
    assert [r["verbs"] for r in unnamed] == [["create"]]
    [role] = [role for role in by_kind(objects, "Role") if any("leases" in r["resources"] for r in role["rules"])]
    bound = [b for b in by_kind(objects, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]]
    assert [s["name"] for b in bound for s in b["subjects"]] == [pod_spec(job)["serviceAccountName"]]


@pytest.mark.parametrize("which", ["base", "example", "imagenet"])
def test_the_workers_reach_the_leading_launcher_through_the_rendezvous_service(which, base, example, monkeypatch):
    """Adoption in deploy/: the launcher's ELASTIC_RENDEZVOUS_ADDRESS is the rendezvous
    Service's name (renamed with it), its ELASTIC_RENDEZVOUS_PORT the Service's port and the
    container's; the Service selects this Job's launcher pods only, and its endpoint is the
    Ready one: the readiness probe asks the rendezvous server's lease question
    (``shared.lease_wire``), which only a leader's horovodrun answers. The adoption window
    outlasts a takeover (the Lease's duration and a minute for the new leader's start and its
    adoption), and elastic-run's own parsers take the container's values."""
    from elastic.environment import ELASTIC_ADOPT_WINDOW, ELASTIC_RENDEZVOUS_ADDRESS, ELASTIC_RENDEZVOUS_PORT
    from shared.lease_wire import lease_path

    objects = {"base": base, "example": example}.get(which) or render(DEPLOY / "overlays" / which)
    job = one(objects, "Job")
    env = expanded_env(objects, "launcher")
    (service,) = [s for s in by_kind(objects, "Service") if "rendezvous" in s["metadata"]["name"]]
    assert env[ELASTIC_RENDEZVOUS_ADDRESS] == service["metadata"]["name"]
    (port,) = service["spec"]["ports"]
    assert int(env[ELASTIC_RENDEZVOUS_PORT]) == port["port"]
    launcher = container(pod_spec(job), "launcher")
    (container_port,) = [p for p in launcher["ports"] if p["name"] == port["targetPort"]]
    assert container_port["containerPort"] == port["port"]
    assert service["spec"]["selector"] == {k: v for k, v in pod_labels(job).items() if k in service["spec"]["selector"]}
    assert service["spec"]["selector"].get("role") == "launcher"
    assert not selects({"matchLabels": service["spec"]["selector"]}, pod_labels(one(objects, "PodTemplate")))
    probe = launcher["readinessProbe"]["httpGet"]
    assert probe == {"path": lease_path(None), "port": port["targetPort"]}

    # elastic-run's parsers of the container's values (--adopt-window, --rendezvous-*)
    from elastic.driver.rendezvous_endpoint import parse_address, parse_port
    assert parse_port(env[ELASTIC_RENDEZVOUS_PORT], ELASTIC_RENDEZVOUS_PORT) == port["port"]
    assert parse_address(env[ELASTIC_RENDEZVOUS_ADDRESS], ELASTIC_RENDEZVOUS_ADDRESS) == service["metadata"]["name"]
    monkeypatch.setenv("ELASTIC_LEADER_ELECTION", env["ELASTIC_LEADER_ELECTION"])
    argv = launcher["args"]
    settings = launch_cli.election_from_args(launch_cli.build_parser().parse_args(argv[1:argv.index("--")]),
                                             "ns", "a-job-id", None)
    assert settings is not None
    assert launch_cli.parse_adopt_window(env[ELASTIC_ADOPT_WINDOW]) > settings.timings.lease_duration + 60
