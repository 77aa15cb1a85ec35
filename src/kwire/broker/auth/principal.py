"""Principals: "User:name" strings, as Kafka writes them in ACLs and logs."""

from __future__ import annotations

from kwire.security.acl import valid_principal

__all__ = ["ANONYMOUS", "principal_from_certificate", "valid_principal"]

ANONYMOUS = "User:ANONYMOUS"  # PLAINTEXT, and SSL without a client certificate

# Kafka prints a certificate's subject as Java's X500Principal.getName() (RFC 2253): most specific
# attribute first, with these short names.
_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
          "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET", "domainComponent": "DC",
          "userId": "UID"}


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def principal_from_certificate(peercert: dict | None) -> str:
    """ "User:CN=alice,O=example" from ``SSLObject.getpeercert()`` (Kafka's default principal mapping),
    ANONYMOUS when the client sent no certificate."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    parts = []
    for rdn in reversed(peercert["subject"]):
        parts.append("+".join(f"{_SHORT.get(key, key)}={_escape(value)}" for key, value in rdn))
    return "User:" + ",".join(parts)
