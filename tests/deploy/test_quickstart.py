"""The top-level README's quick start works as written: it builds for the
nodes' architecture, points the manifests at the pushed image (the base's placeholder pulls
from nowhere), makes the Secret the pods mount, fills the dataset before the job, and every
directory it applies renders."""
import shlex
import shutil

from tests.deploy.render import DEPLOY, ROOT, all_containers, by_kind, one, pod_spec, render, worker_set


def quick_start() -> list[str]:
    """The command lines of README.md's "On a real cluster" block (continuations joined)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## On a real cluster"):]
    section = section[:section.index("\n## ", 4)]
    block = [line[4:] for line in section.splitlines() if line.startswith("    ")]
    return [c.strip() for c in "\n".join(block).replace("\\\n", " ").splitlines() if c.strip()]


def test_the_quick_start_builds_for_amd64_and_points_the_manifests_at_the_image(tmp_path):
    commands = quick_start()
    build = next(c for c in commands if c.startswith("docker build"))
    assert "--platform linux/amd64" in build
    image = shlex.split(build)[shlex.split(build).index("-t") + 1]
    assert any(c == f"docker push {image}" for c in commands)
    # run its manifest edit on a copy of the base, with a registry filled in
    edit = next(c for c in commands if "kustomization.yaml" in c and c.startswith("sed "))
    argv = shlex.split(edit, comments=True)
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    script = argv[2].replace("REGISTRY", "ghcr.io/me")
    pattern, replacement = script.split("#")[1:3]
    target = copy / "job" / "kustomization.yaml"
    assert argv[-1] == "deploy/job/kustomization.yaml"
    target.write_text(target.read_text().replace(pattern, replacement))
    objects = render(copy)
    images = {c["image"] for o in by_kind(objects, "PodTemplate") + by_kind(objects, "Job")
              for c in all_containers(pod_spec(o))}
    assert images == {image.replace("REGISTRY", "ghcr.io/me")}


def test_the_quick_start_makes_the_secret_the_pods_mount_and_fills_the_dataset_first():
    commands = quick_start()
    secret = next(c for c in commands if "create secret generic" in c)
    name = shlex.split(secret)[shlex.split(secret).index("generic") + 1]
    objects = render(DEPLOY)
    mounted = {v["secret"]["secretName"] for o in (worker_set(objects), one(objects, "Job"))
               for v in pod_spec(o)["volumes"] if "secret" in v}
    assert mounted == {name}
    assert not any(c.startswith("ssh-bootstrap") for c in commands)  # needs the project installed
    keygen = next(i for i, c in enumerate(commands) if c.startswith("mkdir -p keys && ssh-keygen"))
    assert keygen < commands.index(secret)
    applies = [i for i, c in enumerate(commands) if c.startswith("kubectl apply -k")]
    storage, job = applies
    fill = next(i for i, c in enumerate(commands) if c.startswith("# fill the dataset"))
    assert storage < fill < job
    for i in applies:
        render(ROOT / shlex.split(commands[i])[3])
