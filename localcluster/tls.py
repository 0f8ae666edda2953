"""The API server's TLS material: a cluster CA and a server certificate for 127.0.0.1.

kubectl (client-go) sends a bearer token only over TLS, so the API is served over HTTPS.
``ensure_certs(directory)`` creates, once, ``ca.crt`` (in the kubeconfig as
``certificate-authority-data``), ``server.crt`` and ``server.key`` (SAN: IP 127.0.0.1, DNS
localhost), all written atomically, and returns their paths. ``server_context(...)`` builds the
server's ``ssl`` context.
"""
from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from .statefiles import write_atomic


def ensure_certs(directory: Path) -> tuple[Path, Path, Path]:
    ca_path, cert_path, key_path = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    if ca_path.exists() and cert_path.exists() and key_path.exists():
        return ca_path, cert_path, key_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    later = now + datetime.timedelta(days=3650)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "local-cluster-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "local-cluster-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(later)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    write_atomic(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode(), 0o600)
    write_atomic(cert_path, cert.public_bytes(pem).decode(), 0o644)
    write_atomic(ca_path, ca.public_bytes(pem).decode(), 0o644)
    return ca_path, cert_path, key_path


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx

