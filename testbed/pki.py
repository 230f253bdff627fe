"""Certificates and keys for the local control plane, made fresh for every cluster.

One CA signs the apiserver's serving certificate and an admin client certificate in the
``system:masters`` group; a separate RSA key signs service-account tokens. Nothing here is
meant to outlive the cluster: ``cluster down`` deletes it with the rest of the state.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_IP = "10.96.0.1"  # the first address of --service-cluster-ip-range
_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    """Paths of the files ``write_pki`` made."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _issue(
    *,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: ExtendedKeyUsageOID | None,
    sans: list[x509.GeneralName] | None = None,
    is_ca: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=not is_ca,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _new_ca(
    common_name: str,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Name, x509.Certificate]:
    """A self-signed CA: its key, its name and its certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = _issue(subject=name, key=key, ca_name=name, ca_key=key, usage=None, is_ca=True)
    return key, name, cert


def write_pki(directory: Path) -> Pki:
    """Create a CA, the apiserver's serving pair, an admin client pair and SA keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_name, ca_cert = _new_ca("gang-scheduler-local-ca")

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", SERVICE_IP)]
    serving_cert = _issue(
        subject=_name("kube-apiserver"),
        key=serving_key,
        ca_name=ca_name,
        ca_key=ca_key,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=sans,
    )

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin_cert = _issue(
        subject=_name("kubernetes-admin", "system:masters"),
        key=admin_key,
        ca_name=ca_name,
        ca_key=ca_key,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(_pem_cert(ca_cert))
    pki.serving_cert.write_bytes(_pem_cert(serving_cert))
    pki.serving_key.write_bytes(_pem_key(serving_key))
    pki.admin_cert.write_bytes(_pem_cert(admin_cert))
    pki.admin_key.write_bytes(_pem_key(admin_key))
    pki.service_account_key.write_bytes(_pem_key(sa_key))
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for key_file in (pki.serving_key, pki.admin_key, pki.service_account_key):
        key_file.chmod(0o600)
    return pki


def write_webhook_pki(directory: Path) -> bytes:
    """A CA and a serving pair for 127.0.0.1 and localhost, as controller-runtime's webhook
    server reads them (``tls.crt`` and ``tls.key`` in its cert dir): an operator's
    webhooks served on the loopback address, which the API server reaches by URL. Returns
    the CA certificate (PEM), the webhook configurations' caBundle."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_name, ca_cert = _new_ca("gang-scheduler-webhook-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(
        subject=_name("webhook"),
        key=key,
        ca_name=ca_name,
        ca_key=ca_key,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    (directory / "tls.crt").write_bytes(_pem_cert(cert))
    (directory / "tls.key").write_bytes(_pem_key(key))
    (directory / "tls.key").chmod(0o600)
    return _pem_cert(ca_cert)
