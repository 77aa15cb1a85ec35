"""What a client's connections need for its ``security.protocol``: a TLS context, a SASL login.

Built once per client from its config (``ConnectionSecurity.from_config``), so that a CA file that
does not exist or a key whose password is wrong is a ``ConfigError`` naming the setting when the
client is made, not a connection error on every broker later.  Each ``BrokerConnection`` then
wraps its socket in TLS with the context (``server_hostname``: the host it connects to, from the
bootstrap servers or the broker's advertised address) and logs in with the SASL login.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from kwire.security.tls import client_context
from kwire.settings import ConfigError

__all__ = ["ConnectionSecurity", "SaslLogin"]

logger = logging.getLogger("kwire.client")


@dataclass(frozen=True)
class SaslLogin:
    """The SASL mechanism and the credentials to log in with (the password never shown)."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class ConnectionSecurity:
    """TLS and SASL for one client's connections; ``PLAINTEXT`` when both are None."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @classmethod
    def from_config(cls, config: Any) -> ConnectionSecurity:
        """From a client config's security settings (ConfigError naming the setting when a file is bad)."""
        protocol = config.security_protocol
        context = _context(config) if protocol in ("SSL", "SASL_SSL") else None
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            sasl = SaslLogin(config.sasl_mechanism, config.sasl_username, config.sasl_password)
            if config.sasl_mechanism == "PLAIN" and context is None:
                logger.warning("sasl.mechanism=PLAIN over SASL_PLAINTEXT sends the password unencrypted; "
                               "use SASL_SSL or a SCRAM mechanism")
        return cls(protocol, context, sasl)


def _missing(key: str, path: str | None) -> None:
    if path is not None and not os.path.exists(path):
        raise ConfigError(f"{key}: {path} does not exist")


def _context(config: Any) -> ssl.SSLContext:
    ca = config.ssl_ca_location
    cert = config.ssl_certificate_location
    key = config.ssl_key_location
    for name, path in (("ssl.ca.location", ca), ("ssl.certificate.location", cert), ("ssl.key.location", key)):
        _missing(name, path)
    check_hostname = config.ssl_endpoint_identification_algorithm == "https"
    try:
        context = client_context(ca_location=ca, check_hostname=check_hostname)
    except (OSError, ssl.SSLError) as exc:
        where = f"ssl.ca.location: {ca}" if ca else "the system's trusted CAs"
        raise ConfigError(f"{where}: cannot load CA certificates (PEM expected): {_reason(exc)}") from None
    if cert is not None:
        try:
            # "" rather than None: with no password OpenSSL would prompt on the terminal for an encrypted key.
            context = client_context(ca_location=ca, certificate_location=cert, key_location=key,
                                     key_password=config.ssl_key_password or "", check_hostname=check_hostname)
        except (OSError, ssl.SSLError, ValueError) as exc:
            files = f"{cert}" + (f" and {key}" if key else "")
            raise ConfigError(
                f"ssl.certificate.location / ssl.key.location: cannot load the client certificate and key from "
                f"{files} (PEM expected; a wrong or missing ssl.key.password, or a key that is not the "
                f"certificate's?): {_reason(exc)}") from None
    if not config.enable_ssl_certificate_verification:
        # librdkafka's enable.ssl.certificate.verification=false: encrypted, but anyone can be the broker.
        logger.warning("enable.ssl.certificate.verification=false: the brokers' certificates are not checked")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
