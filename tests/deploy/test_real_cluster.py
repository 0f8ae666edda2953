"""What a real cluster needs of deploy/: a restarted worker keeps its host key, a
new Job starts fresh, a default-deny namespace works and nothing else reaches the job,
resources fit common 1-GPU nodes, the launcher stays off GPUs, a second job has its own key
and claims, PodSecurity and node drains behave as deploy/README.md says."""
import pytest

from tests.deploy.render import (
    DEPLOY,
    JOB_UID,
    all_containers,
    by_kind,
    container,
    env,
    expand,
    one,
    pod_labels,
    pod_spec,
    quantity,
    render,
    worker_set,
)

JOB_LABEL = "elastic-horovod/job"
# what PodSecurity "baseline" lets a container add (pod-security-admission's list)
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


@pytest.fixture(scope="module")
def objects() -> list:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def example() -> list:
    return render(DEPLOY / "overlays" / "example")


def test_the_host_key_lives_on_a_pod_scoped_volume(objects):
    spec = pod_spec(worker_set(objects))
    worker = container(spec, "worker")
    key_dir = env(worker)["ELASTIC_HOST_KEY_DIR"]
    mount = next(m for m in worker["volumeMounts"] if m["mountPath"] == key_dir)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["emptyDir"]["medium"] == "Memory"  # pod-scoped, never on the node's disk
    assert not mount.get("readOnly")


def test_checkpoints_are_per_job_object_so_a_new_job_starts_fresh(objects):
    job = one(objects, "Job")
    launcher = container(pod_spec(job), "launcher")
    uid_env = next(e for e in launcher["env"] if e["name"] == "JOB_UID")
    assert uid_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/controller-uid']"
    args = [expand(a, launcher, pod_labels(job)) for a in launcher["args"]]
    assert f"--checkpoint-dir=/checkpoints/elastic-horovod/{JOB_UID}" in args


def policies_for(objects, labels: dict) -> list:
    return [p for p in by_kind(objects, "NetworkPolicy") if p["spec"]["podSelector"]["matchLabels"].items()
            <= labels.items()]


def peers(policy: dict, direction: str) -> list:
    key = "from" if direction == "ingress" else "to"
    return [peer for rule in policy["spec"].get(direction, []) for peer in rule.get(key, [])]


def test_network_policies_admit_the_jobs_own_pods_dns_and_the_api_only(objects, example):
    for objs, other in ((objects, example), (example, objects)):
        workers, launcher = pod_labels(worker_set(objs)), pod_labels(one(objs, "Job"))
        theirs = [pod_labels(worker_set(other)), pod_labels(one(other, "Job"))]
        for labels in (workers, launcher):
            selected = policies_for(objs, labels)
            assert selected, "a job pod no policy selects is cut off in a default-deny namespace"
            assert {"Ingress", "Egress"} <= {t for p in selected for t in p["spec"]["policyTypes"]}
            for policy in selected:
                for direction in ("ingress", "egress"):
                    for peer in peers(policy, direction):
                        assert set(peer) == {"podSelector"}, peer  # no namespace, no ipBlock
                        sel = peer["podSelector"]["matchLabels"]
                        assert sel.items() <= workers.items() and sel.items() <= launcher.items()
                        assert not any(sel.items() <= t.items() for t in theirs), "the other job is let in"
            # each ingress rule names its peers (a rule without `from` admits everyone)
            assert all(rule.get("from") for p in selected for rule in p["spec"].get("ingress", []))
        open_ports = {(p["protocol"], p["port"]) for pol in policies_for(objs, workers)
                      for rule in pol["spec"].get("egress", []) if "to" not in rule for p in rule["ports"]}
        assert open_ports == {("UDP", 53), ("TCP", 53)}  # workers: DNS, nothing else outside the job
        api = {(p["protocol"], p["port"]) for pol in policies_for(objs, launcher)
               for rule in pol["spec"].get("egress", []) if "to" not in rule for p in rule["ports"]}
        assert api == {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443)}


def test_workers_fit_common_one_gpu_nodes_and_ask_for_ephemeral_storage(objects):
    spec = pod_spec(worker_set(objects))
    worker = container(spec, "worker")
    limits = worker["resources"]["limits"]
    gpus = int(limits["nvidia.com/gpu"])
    # g4dn/g5.2xlarge, g2-standard-8: 8 vCPUs / 32 GiB, of which ~7.5 CPU and ~28 GiB allocatable
    assert quantity(limits["cpu"]) / gpus <= 7 and quantity(limits["memory"]) / gpus <= 28 * 2**30
    data = next(v for v in spec["volumes"] if v["name"] == "data")
    assert quantity(limits["ephemeral-storage"]) > quantity(data["emptyDir"]["sizeLimit"])
    for obj in (worker_set(objects), one(objects, "Job")):
        for c in all_containers(pod_spec(obj)):
            assert "ephemeral-storage" in c["resources"]["requests"], c["name"]


def test_the_launcher_keeps_off_gpu_nodes_and_sees_no_gpu(objects):
    spec = pod_spec(one(objects, "Job"))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]} in terms[0]["matchExpressions"]
    assert "tolerations" not in spec
    for c in all_containers(spec):
        assert env(c).get("NVIDIA_VISIBLE_DEVICES") == "void", c["name"]
        assert "nvidia.com/gpu" not in c["resources"]["limits"]


def test_the_example_runs_on_a_gpu_pool_with_its_own_key_and_claims(objects, example):
    spec = pod_spec(worker_set(example))
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "tolerations" not in pod_spec(one(example, "Job"))

    def refs(objs):
        found = set()
        for obj in by_kind(objs, "PodTemplate") + by_kind(objs, "Job"):
            for v in pod_spec(obj)["volumes"]:
                if "secret" in v:
                    found.add(("Secret", v["secret"]["secretName"]))
                if "persistentVolumeClaim" in v:
                    found.add(("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]))
        return found

    mine, base = refs(example), refs(objects)
    assert len(mine) == 3 and not mine & base  # own key, own dataset and checkpoint claims
    storage = render(DEPLOY / "overlays" / "example" / "storage")
    claims = {("PersistentVolumeClaim", o["metadata"]["name"]) for o in storage}
    assert {r for r in mine if r[0] == "PersistentVolumeClaim"} == claims


def test_drains_pass_an_unhealthy_worker(objects):
    assert one(objects, "PodDisruptionBudget")["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_workers_meet_podsecurity_baseline_and_the_launcher_restricted(objects):
    """deploy/README.md: the namespace needs `pod-security.kubernetes.io/enforce: baseline`
    (sshd runs as root with three capabilities); with `restricted` only the workers fail."""
    workers = pod_spec(worker_set(objects))
    for c in all_containers(workers):
        assert set(c["securityContext"]["capabilities"]["add"]) <= BASELINE_CAPABILITIES
        assert not c["securityContext"].get("privileged")
    assert not any(k in workers for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not any("hostPath" in v for v in workers["volumes"])
    launcher = pod_spec(one(objects, "Job"))
    assert launcher["securityContext"]["runAsNonRoot"] is True
    assert launcher["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for c in all_containers(launcher):
        ctx = c["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]}
    text = (DEPLOY / "README.md").read_text()
    assert "pod-security.kubernetes.io/enforce=baseline" in text


def test_the_daemons_probes_allow_for_a_python_start(objects):
    daemon = container(pod_spec(one(objects, "Job")), "discovery-daemon")
    for probe in ("startupProbe", "livenessProbe"):
        assert daemon[probe]["timeoutSeconds"] >= 5


@pytest.mark.parametrize("overlay", ["", "overlays/imagenet", "overlays/imagenet-gpu8"])
def test_the_readmes_nccl_settings_are_what_elastic_run_gives_the_training(overlay):
    """deploy/README.md, "NCCL across nodes": each setting its table names is elastic-run's
    default (elastic/launch/nccl.py) or the launcher's --network-interface, in every GPU rendering."""
    from elastic.launch.nccl import NCCL_DEFAULTS

    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("## NCCL across nodes"):]
    section = section[:section.index("\n## ", 1)]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in section.splitlines()
            if line.startswith("| `NCCL_")}
    threads, socks = NCCL_DEFAULTS["NCCL_SOCKET_NTHREADS"], NCCL_DEFAULTS["NCCL_NSOCKS_PERTHREAD"]
    assert rows.pop("`NCCL_SOCKET_NTHREADS` x `NCCL_NSOCKS_PERTHREAD`") == f"{threads} x {socks}"
    assert f"{int(threads) * int(socks)} TCP flows per connection" in section
    assert rows.pop("`NCCL_DEBUG`") == f"`{NCCL_DEFAULTS['NCCL_DEBUG']}`"
    assert set(NCCL_DEFAULTS) == {"NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_DEBUG"}  # each in a row
    interface = rows.pop("`NCCL_SOCKET_IFNAME`").strip("`")
    assert not rows, rows
    args = container(pod_spec(one(render(DEPLOY / overlay), "Job")), "launcher")["args"]
    assert f"--network-interface={interface}" in args[:args.index("--")]
    assert f"`--network-interface {interface}`" in section
