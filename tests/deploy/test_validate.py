"""The rendered manifests are valid Kubernetes objects, strictly (no unknown field), for the
minimum supported version (1.29: native sidecars on by default) and the newest that
kubernetes-validate knows; offline (the schemas ship with kubernetes-validate)."""
import re

import kubernetes_validate
import pytest

from tests.deploy.render import DEPLOY, ROOT, render

MINIMUM = "1.29.0"
NEWEST = kubernetes_validate.latest_version()
KUSTOMIZATIONS = [DEPLOY, DEPLOY / "storage", DEPLOY / "overlays" / "example", DEPLOY / "overlays" / "gpu8",
                  DEPLOY / "overlays" / "spot", DEPLOY / "overlays" / "imagenet",
                  DEPLOY / "overlays" / "imagenet-gpu8",
                  DEPLOY / "overlays" / "imagenet" / "storage",
                  DEPLOY / "overlays" / "example" / "storage"]


@pytest.mark.parametrize("version", [MINIMUM, NEWEST])
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_object_is_valid_strictly(directory, version):
    for obj in render(directory):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for {version}: "
                        f"{'.'.join(map(str, exc.path))}: {exc.message}")


def test_the_readme_states_the_minimum_version():
    """The version validated here is the one the walkthrough asks for."""
    text = (DEPLOY / "README.md").read_text()
    major_minor = MINIMUM.rsplit(".", 1)[0]
    assert re.search(rf"Kubernetes {re.escape(major_minor)}\b", text)
    assert f"{major_minor}+" in (ROOT / "README.md").read_text()
