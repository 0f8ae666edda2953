"""Per-job SSH key pairs and the Kubernetes Secret that carries them.

Pure functions (``generate_keypair``, ``fingerprint``, ``secret_manifest``) and one writer
(``write_keys``).  The private key is OpenSSH-format ed25519 without a passphrase; it is written
with mode 0600 and never returned in anything meant for stdout.  The Secret (``v1``, type
``Opaque``) has the keys ``id_ed25519`` and ``id_ed25519.pub``: workers install the public key
as ``authorized_keys`` (images/worker-entrypoint.sh), the launcher uses the private key.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from elastic.errors import ConfigError
from elastic.ssh.known_hosts import fingerprint
from shared.atomicfile import write_atomic

DEFAULT_SECRET_NAME = "elastic-horovod-ssh"
PRIVATE_NAME = "id_ed25519"
PUBLIC_NAME = "id_ed25519.pub"
SECRET_NAME = "secret.yaml"


@dataclass(frozen=True)
class KeyPair:
    """An ed25519 key pair: the private key (OpenSSH PEM bytes) and the ``authorized_keys`` line."""

    private_pem: bytes
    public_line: str

    def __repr__(self) -> str:  # never show the private key in logs or tracebacks
        return f"KeyPair(public_line={self.public_line!r})"


def generate_keypair(comment: str = "elastic-horovod") -> KeyPair:
    """Generate a fresh ed25519 key pair (blocks briefly for the OS RNG)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private, f"{public.decode('ascii')} {comment}\n")


def public_fingerprint(public_line: str) -> str:
    """Fingerprint of an ``authorized_keys``-style line ``type base64 [comment]``."""
    parts = public_line.split()
    if len(parts) < 2:
        raise ConfigError(f"not a public key line: {public_line[:40]!r}")
    return fingerprint(parts[1])


def secret_manifest(pair: KeyPair, name: str = DEFAULT_SECRET_NAME, namespace: str | None = None) -> str:
    """Return a ``v1`` Secret manifest (YAML) holding ``pair``."""
    metadata: dict = {"name": name, "labels": {"app": "elastic-horovod"}}
    if namespace:
        metadata["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {
            PRIVATE_NAME: base64.b64encode(pair.private_pem).decode("ascii"),
            PUBLIC_NAME: base64.b64encode(pair.public_line.encode("ascii")).decode("ascii"),
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class KeyFiles:
    """The files ``write_keys`` produced."""

    private: Path
    public: Path
    secret: Path


def write_keys(out_dir: str | os.PathLike, pair: KeyPair, *, secret_name: str = DEFAULT_SECRET_NAME,
               namespace: str | None = None, force: bool = False) -> KeyFiles:
    """Write ``id_ed25519`` (0600), ``id_ed25519.pub`` and ``secret.yaml`` (0600) into ``out_dir``.

    Refuses (``ConfigError``) to replace an existing key unless ``force``: a running job's
    workers trust the old one.  Each file is written atomically.
    """
    out = Path(out_dir)
    files = KeyFiles(out / PRIVATE_NAME, out / PUBLIC_NAME, out / SECRET_NAME)
    if not force:
        for path in (files.private, files.public, files.secret):
            if path.exists():
                raise ConfigError(f"{path} exists; use --force to replace the job's key")
    try:
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(files.private, pair.private_pem, 0o600)
        write_atomic(files.public, pair.public_line, 0o644)
        write_atomic(files.secret, secret_manifest(pair, secret_name, namespace), 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write keys to {out}: {exc.strerror or exc}") from exc
    return files


def apply_secret(pair: KeyPair, name: str, namespace: str, kubeconfig: str | None, force: bool) -> str:
    """Create (or with ``force`` replace) the Secret through the Kubernetes API; return
    ``created`` or ``replaced``.  Raises ``ConfigError`` on API or kubeconfig errors."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError as URLLib3Error

    try:
        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
                api_client = client.ApiClient()
            except ConfigException:
                api_client = config.new_client_from_config()
    except (ConfigException, OSError) as exc:
        raise ConfigError(f"no usable kubeconfig: {exc}") from exc
    body = yaml.safe_load(secret_manifest(pair, name, namespace))
    api = client.CoreV1Api(api_client)
    try:
        try:
            api.create_namespaced_secret(namespace, body)
            return "created"
        except ApiException as exc:
            if exc.status != 409:
                raise
            if not force:
                raise ConfigError(f"Secret {namespace}/{name} exists; use --force to replace it") from exc
            api.replace_namespaced_secret(name, namespace, body)
            return "replaced"
    except ApiException as exc:
        raise ConfigError(f"cannot write Secret {namespace}/{name}: HTTP {exc.status} {exc.reason}") from exc
    except (OSError, URLLib3Error) as exc:
        reason = str(getattr(exc, "reason", None) or exc).rsplit(": ", 1)[-1]
        raise ConfigError(f"cannot reach the Kubernetes API at {api_client.configuration.host}: {reason}") from exc
    finally:
        api_client.close()
