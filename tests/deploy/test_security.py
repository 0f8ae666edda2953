"""The security properties a cluster operator checks in deploy/: workers hold no private key
and run sshd with three capabilities; the API token is mounted read-only where the API is
called, never automatically; the launcher pod is non-root without capabilities; the base
deletes nothing of the user's."""
import pytest

from tests.deploy.render import DEPLOY, all_containers, by_kind, one, pod_spec, render, worker_set

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SSHD_CAPABILITIES = {"SETUID", "SETGID", "SYS_CHROOT"}


@pytest.fixture(scope="module")
def objects() -> list:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def workers(objects) -> dict:
    return pod_spec(worker_set(objects))


@pytest.fixture(scope="module")
def launcher_pod(objects) -> dict:
    return pod_spec(one(objects, "Job"))


def secret_volume_keys(volume: dict) -> list:
    """The Secret keys a volume exposes; None stands for 'every key of the Secret'."""
    if "secret" in volume:
        items = volume["secret"].get("items")
        return [i["key"] for i in items] if items else [None]
    keys = []
    for source in volume.get("projected", {}).get("sources", []):
        if "secret" in source:
            items = source["secret"].get("items")
            keys += [i["key"] for i in items] if items else [None]
    return keys


def token_volumes(spec: dict) -> set:
    return {v["name"] for v in spec["volumes"]
            if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))}


def test_no_private_key_in_any_worker_volume(workers):
    keys = [k for v in workers["volumes"] for k in secret_volume_keys(v)]
    assert keys, "the workers mount no key at all"
    assert None not in keys, "a worker volume mounts a whole Secret (private key included)"
    assert all(k.endswith(".pub") for k in keys), keys


def test_sshd_runs_with_three_capabilities_and_no_escalation(workers):
    for c in all_containers(workers):
        ctx = c["securityContext"]
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert set(ctx["capabilities"]["add"]) == SSHD_CAPABILITIES
        assert ctx["allowPrivilegeEscalation"] is False
        assert not ctx.get("privileged", False)
    assert workers["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_launcher_pod_is_non_root_without_capabilities_on_a_read_only_root(launcher_pod):
    pod_ctx = launcher_pod["securityContext"]
    assert pod_ctx["runAsNonRoot"] is True and pod_ctx["runAsUser"] != 0
    assert pod_ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in all_containers(launcher_pod):
        ctx = c["securityContext"]
        assert ctx["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert ctx["allowPrivilegeEscalation"] is False, c["name"]
        assert ctx["readOnlyRootFilesystem"] is True, c["name"]
        assert ctx.get("runAsUser", pod_ctx["runAsUser"]) != 0, c["name"]
        assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"]), f"{c['name']}: no writable /tmp"


def test_the_key_is_readable_by_the_launchers_group_and_nobody_else(launcher_pod):
    """fsGroup makes the Secret's files group-owned by the pod's gid: 0440 lets the launcher
    and daemon (that gid, not the files' owner, so ssh accepts the key) read it."""
    ssh = next(v for v in launcher_pod["volumes"] if "secret" in v)
    assert ssh["secret"]["defaultMode"] == 0o440
    ctx = launcher_pod["securityContext"]
    assert ctx["fsGroup"] == ctx["runAsGroup"]


def test_the_token_is_mounted_read_only_in_the_containers_that_call_the_api(objects, launcher_pod):
    """No automatic token in the pod; the projected token volume is mounted, read-only at the
    service account's path, in the init container, the two sidecars and the launcher
    container (its leader election reads and writes the Job's Lease; deploy/README.md,
    "Launcher failover"), and in nothing else."""
    assert launcher_pod["automountServiceAccountToken"] is False
    account = one(objects, "ServiceAccount", launcher_pod["serviceAccountName"])
    assert account["automountServiceAccountToken"] is False
    tokens = token_volumes(launcher_pod)
    assert len(tokens) == 1
    holders = {c["name"] for c in all_containers(launcher_pod)
               if any(m["name"] in tokens for m in c.get("volumeMounts", []))}
    assert holders == {"discovery-daemon", "worker-start", "worker-scaler", "launcher"}
    for c in all_containers(launcher_pod):
        assert all(m["name"] in tokens for m in c.get("volumeMounts", [])
                   if m["mountPath"].startswith("/var/run/secrets")), c["name"]
        if c["name"] in holders:
            assert any(m["name"] in tokens and m["mountPath"] == SA_PATH and m["readOnly"]
                       for m in c["volumeMounts"])


def test_no_namespace_in_the_job_so_delete_keeps_the_users_data(objects):
    """`kubectl delete -k deploy/` deletes what the base holds: not the Namespace (with the
    user's Secret), not the dataset or checkpoint claims."""
    kinds = {o["kind"] for o in objects}
    assert "Namespace" not in kinds
    assert "PersistentVolumeClaim" not in kinds and "Secret" not in kinds


def test_every_container_runs_under_the_images_entrypoint(objects):
    """`command:` would replace tini (PID 1 reaping ssh's ControlPersist masters, passing
    signals on); `args:` keeps it."""
    for obj in by_kind(objects, "PodTemplate") + by_kind(objects, "Job"):
        for c in all_containers(pod_spec(obj)):
            assert "command" not in c, f"{obj['kind']}/{c['name']} replaces the image's entrypoint"


def test_images_are_not_in_docker_hubs_library_namespace(objects):
    for obj in by_kind(objects, "PodTemplate") + by_kind(objects, "Job"):
        for c in all_containers(pod_spec(obj)):
            first = c["image"].split("/", 1)[0]
            assert "/" in c["image"] and ("." in first or ":" in first or first == "localhost"), c["image"]
