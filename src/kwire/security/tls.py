"""TLS contexts for kwire's client and broker (TLS 1.2 and later only).

Option names follow librdkafka's (ssl.ca.location, ssl.certificate.location, ssl.key.location,
ssl.key.password) and Kafka's ssl.client.auth, so config maps straight onto the arguments.
"""

from __future__ import annotations

import os
import ssl

CLIENT_AUTH = ("none", "requested", "required")


def _load_ca(context: ssl.SSLContext, ca_location: str) -> None:
    # librdkafka accepts a PEM file or a directory of hashed certificates; so do we.
    if os.path.isdir(ca_location):
        context.load_verify_locations(capath=ca_location)
    else:
        context.load_verify_locations(cafile=ca_location)


def _password(key_password: str | None):
    # Never None: OpenSSL would then prompt on the terminal for an encrypted key, hanging a broker or a test.
    # A callable returning b"" makes a missing password a plain SSLError instead.
    return key_password if key_password is not None else (lambda: b"")


def client_context(*, ca_location: str | None = None, certificate_location: str | None = None,
                   key_location: str | None = None, key_password: str | None = None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A context that verifies the broker (against ca_location, else the system's CAs), with an optional
    client certificate for mutual TLS. check_hostname=False keeps chain verification on."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = check_hostname
    if ca_location:
        _load_ca(context, ca_location)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certificate_location:
        context.load_cert_chain(certificate_location, key_location, password=_password(key_password))
    elif key_location:
        raise ValueError("ssl.key.location given without ssl.certificate.location")
    return context


def server_context(*, certificate_location: str, key_location: str | None = None, key_password: str | None = None,
                   ca_location: str | None = None, client_auth: str = "none") -> ssl.SSLContext:
    """A broker's context. client_auth is Kafka's ssl.client.auth: "none", "requested" (verify a client
    certificate if one is sent) or "required" (mutual TLS); the last two need ca_location."""
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    if client_auth != "none" and not ca_location:
        raise ValueError(f"ssl.client.auth={client_auth} needs a CA (ssl.ca.location) to verify clients")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certificate_location, key_location, password=_password(key_password))
    if client_auth != "none":
        _load_ca(context, ca_location)
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context
