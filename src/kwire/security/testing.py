"""Throwaway certificates for tests (and for anyone trying TLS locally): a CA and certificates it signs.

Needs the ``cryptography`` package. Keys are EC P-256: quick to make, and every Kafka client takes them.
Nothing here is fit for production (unencrypted keys on disk, no revocation).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class CertPaths(NamedTuple):
    """PEM files of one certificate and its private key."""

    cert: str
    key: str


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write(directory: str, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey,
           key_password: str | None) -> CertPaths:
    os.makedirs(directory, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem) or "cert"
    base, n = os.path.join(directory, stem), 1
    while os.path.exists(base + ".pem"):  # several certificates for one CN (e.g. a valid and an expired one)
        n += 1
        base = os.path.join(directory, f"{stem}-{n}")
    encryption = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
                  else serialization.NoEncryption())
    with open(base + ".pem", "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(base + ".key", "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    return CertPaths(base + ".pem", base + ".key")


def make_ca(directory: str, cn: str = "kwire test CA") -> CertPaths:
    """A self-signed CA, valid from a day ago for ten years."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return _write(directory, "ca", cert, key, None)


def _load_ca(ca: CertPaths) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    with open(ca.cert, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    with open(ca.key, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    return cert, key  # type: ignore[return-value]


def make_cert(ca: CertPaths, directory: str, cn: str, sans: Iterable[str] = ("localhost", "127.0.0.1"), *,
              not_before: datetime.datetime | None = None, not_after: datetime.datetime | None = None,
              client: bool = False, key_password: str | None = None) -> CertPaths:
    """A certificate for ``cn`` signed by ``ca`` (from make_ca). ``sans`` are DNS names or IP addresses.

    By default valid from five minutes ago for thirty days; pass not_after in the past for an expired one.
    client=True makes a client certificate (for mutual TLS) instead of a server one.
    """
    ca_cert, ca_key = _load_ca(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    names: list[x509.GeneralName] = []
    for san in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(not_before or now - datetime.timedelta(minutes=5))
               .not_valid_after(not_after or now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return _write(directory, cn, cert, key, key_password)
