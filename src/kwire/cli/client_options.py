"""The flags every command that talks to a cluster takes, and what they turn into.

A command module uses three things::

    from .client_options import add_client_options, build_config, client_command

    def register(sub):
        p = sub.add_parser("produce", help="...")
        add_client_options(p)                  # --bootstrap, -X, --config, --timeout, --json
        p.set_defaults(func=client_command(run))

    def run(args) -> int:
        config = build_config(args, ProducerConfig)   # = ProducerConfig.from_settings(client_settings(args))
        ...                                    # args.timeout (seconds), args.json (bool)

(``open_admin(args)`` is the same for the admin client, its calls bounded by ``--timeout``.)

The flags:

* ``--bootstrap HOST:PORT[,HOST:PORT...]`` (``-b``): the cluster; default ``$KWIRE_BOOTSTRAP``,
  then ``localhost:9092``.
* ``-X key=value``, repeated: any client setting by its Kafka name (``-X client.id=me``), as kcat
  takes them.
* ``--config FILE``: a Java ``.properties`` file of Kafka settings (as Kafka's tools take with
  ``--command-config``).
* ``--timeout SECONDS``: how long to wait for the cluster's answers (default 30); it also sets
  ``request.timeout.ms`` (and caps ``socket.connection.setup.timeout.ms``) unless the settings
  give them.
* ``--json``: one JSON document on stdout instead of tables.

Security (TLS, SASL; see ``kwire.client.config``) has flags of its own, each also read from an
environment variable, so that a password need not be on the command line (where ``ps`` and the
shell's history show it):

    --security-protocol P        KWIRE_SECURITY_PROTOCOL      security.protocol
    --sasl-mechanism M           KWIRE_SASL_MECHANISM         sasl.mechanism
    --sasl-username U            KWIRE_SASL_USERNAME          sasl.username
    --sasl-password P            KWIRE_SASL_PASSWORD          sasl.password
    --ssl-ca-location F          KWIRE_SSL_CA_LOCATION        ssl.ca.location
    --ssl-certificate-location F KWIRE_SSL_CERTIFICATE_LOCATION  ssl.certificate.location
    --ssl-key-location F         KWIRE_SSL_KEY_LOCATION       ssl.key.location
                                 KWIRE_SSL_KEY_PASSWORD       ssl.key.password
                                 KWIRE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM

Variables the protocol in effect does not use are ignored (``KWIRE_SASL_*`` without a SASL
protocol, ``KWIRE_SSL_*`` without TLS), so that variables exported for one cluster do not get in
the way of another; the same settings given as flags, ``-X`` or in the file are errors there.

Precedence, lowest first: the defaults, the environment (``KWIRE_BOOTSTRAP``, ``KWIRE_SASL_...``),
``--config``, ``-X`` (later ones win), the dedicated flags (``--bootstrap``, ``--sasl-username``...).
``client_settings(args)`` returns the merged dotted settings.

``client_command(handler)`` wraps a handler so that configuration errors, broker error codes,
unreachable clusters and timeouts end as one line on stderr (``kwire: error: ...``) and exit
status 1, never a traceback.  A cluster that is plainly not there fails fast, as kcat does: when
every bootstrap address refuses the connection (or does not resolve) for 2 s, the command ends
then, naming the addresses, instead of retrying for ``--timeout`` (which still bounds a slow or
silent network: an address that does not answer at all is left to it).
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .arg_types import key_value, positive_float
from .output import fail

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_TIMEOUT",
    "SECURITY_OPTIONS",
    "add_client_options",
    "build_config",
    "client_command",
    "client_settings",
    "open_admin",
]

BOOTSTRAP_ENV = "KWIRE_BOOTSTRAP"
DEFAULT_BOOTSTRAP = "localhost:9092"
DEFAULT_TIMEOUT = 30.0

C = TypeVar("C")

# Security settings with a flag (None: environment only) and an environment variable each:
# Kafka name -> (flag, variable, help).
SECURITY_OPTIONS: dict[str, tuple[str | None, str, str]] = {
    "security.protocol": ("--security-protocol", "KWIRE_SECURITY_PROTOCOL",
                          "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL"),
    "sasl.mechanism": ("--sasl-mechanism", "KWIRE_SASL_MECHANISM", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    "sasl.username": ("--sasl-username", "KWIRE_SASL_USERNAME", "the SASL user to log in as"),
    "sasl.password": ("--sasl-password", "KWIRE_SASL_PASSWORD",
                      "the SASL password (discouraged: ps and shell history show it; prefer "
                      "$KWIRE_SASL_PASSWORD or sasl.password in the --config FILE)"),
    "ssl.ca.location": ("--ssl-ca-location", "KWIRE_SSL_CA_LOCATION",
                        "PEM file of the CA that signed the brokers' certificates (default: the system's)"),
    "ssl.certificate.location": ("--ssl-certificate-location", "KWIRE_SSL_CERTIFICATE_LOCATION",
                                 "PEM client certificate, for brokers that require mutual TLS"),
    "ssl.key.location": ("--ssl-key-location", "KWIRE_SSL_KEY_LOCATION", "PEM private key of the client certificate"),
    "ssl.key.password": (None, "KWIRE_SSL_KEY_PASSWORD", ""),
    "ssl.endpoint.identification.algorithm": (None, "KWIRE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM", ""),
}

def _security_help(config_flag: str) -> str:
    return (f"TLS and SASL.  Each setting comes from its flag, else -X KEY=VALUE, else {config_flag} FILE, else the "
            "environment: " + ", ".join(f"{env} ({key})" for key, (_, env, _) in SECURITY_OPTIONS.items()) +
            "; SASL variables are ignored unless security.protocol is SASL_*, SSL ones unless it is SSL or SASL_SSL.")


def add_client_options(parser: argparse.ArgumentParser, *, json_output: bool = True,
                       config_flag: str = "--config", bootstrap_help: str | None = None) -> None:
    """Add --bootstrap, -X, --config, --timeout (and --json unless ``json_output`` is False).

    ``config_flag`` renames --config for a command that needs that flag for something else;
    ``bootstrap_help`` replaces the help of --bootstrap for a command where its absence means
    something else than the default address.
    """
    group = parser.add_argument_group("cluster connection")
    group.add_argument("-b", "--bootstrap", metavar="HOST:PORT[,...]",
                       help=bootstrap_help or f"bootstrap servers (default ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})")
    group.add_argument("-X", dest="settings", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                       help="a client setting by its Kafka name, e.g. -X client.id=me (repeatable)")
    group.add_argument(config_flag, dest="config_file", metavar="FILE",
                       help="a Java .properties file of client settings")
    group.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                       help=f"how long to wait for the cluster (default {DEFAULT_TIMEOUT:g})")
    security = parser.add_argument_group("security", _security_help(config_flag))
    for key, (flag, env, text) in SECURITY_OPTIONS.items():
        if flag is not None:
            metavar = "FILE" if key.endswith(".location") else key.rsplit(".", 1)[-1].upper()
            text = text.replace("--config FILE", f"{config_flag} FILE")
            security.add_argument(flag, dest=_dest(key), metavar=metavar,
                                  help=f"{text} (${env}; -X {key}=...)")
    if json_output:
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout instead of tables")


def _dest(key: str) -> str:
    return "security_" + key.replace(".", "_")


def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The client settings the flags give, by Kafka's dotted names, merged by precedence."""
    settings: dict[str, Any] = {"bootstrap.servers": os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP}
    from_env = {key: os.environ[env] for key, (_, env, _) in SECURITY_OPTIONS.items()
                if os.environ.get(env)}  # set but empty counts as unset, as for KWIRE_BOOTSTRAP
    settings.update(from_env)
    given: list[tuple[str, Any]] = []
    if args.config_file:
        from kwire.client.config import load_properties

        given.extend(load_properties(args.config_file).items())
    given.extend(args.settings)
    # One spelling per setting (the configs take request_timeout_ms too; no Kafka name has an
    # underscore), so that a later source replaces an earlier one whichever way each wrote it.
    settings.update((key.replace("_", "."), value) for key, value in given)
    if args.bootstrap:
        settings["bootstrap.servers"] = args.bootstrap
    for key in SECURITY_OPTIONS:
        value = getattr(args, _dest(key), None)
        if value is not None:
            settings[key] = value
    _drop_unused_environment(settings, from_env)
    timeout_ms = int(args.timeout * 1000)
    settings.setdefault("request.timeout.ms", timeout_ms)
    settings.setdefault("socket.connection.setup.timeout.ms", min(timeout_ms, 10_000))
    return settings


def _drop_unused_environment(settings: dict[str, Any], from_env: dict[str, str]) -> None:
    """Variables are ambient (exported for one cluster, still set for the next): the SASL ones are
    dropped when the protocol in effect has no SASL, the SSL ones when it has no TLS.  A setting
    given any other way stays, and the config refuses it there."""
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).strip().upper()
    for key, value in from_env.items():
        unused = (key.startswith("sasl.") and not protocol.startswith("SASL_")) or (
            key.startswith("ssl.") and not protocol.endswith("SSL"))
        if unused and settings.get(key) is value:
            del settings[key]


def build_config(args: argparse.Namespace, config_class: type[C]) -> C:
    """``config_class.from_settings`` (ProducerConfig, ConsumerConfig, AdminConfig) of the flags."""
    return config_class.from_settings(client_settings(args))  # type: ignore[attr-defined]


def bootstrap_of(args: argparse.Namespace) -> str:
    """The bootstrap servers the command uses (for error messages)."""
    try:
        return str(client_settings(args)["bootstrap.servers"])
    except Exception:  # a broken --config file: the error itself is reported elsewhere
        return args.bootstrap or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def _connection_failure(exc: BaseException):
    """The broken connection behind a timeout, if that is what it was."""
    from kwire.client.errors import BrokerConnectionError

    seen = 0
    while exc is not None and seen < 10:  # a chain of retry loops, each naming the one inside
        if isinstance(exc, BrokerConnectionError):
            return exc
        exc, seen = exc.__cause__, seen + 1
    return None


# How long every bootstrap address may refuse connections before the command gives up; a broker
# started a moment before the command still gets that long to open its port.
REFUSED_FOR_S = 2.0
_REFUSED_RETRY_S = 0.1


def _all_refused(bootstrap: Any, window: float) -> str | None:
    """Why no bootstrap address can be connected to, when each one refused (or did not resolve)
    for ``window`` seconds; None as soon as one accepts, or when one does not answer at all."""
    from kwire.client.config import parse_host_port

    addresses = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    try:
        targets = [parse_host_port(a) for a in addresses if str(a).strip()]
    except ValueError:
        return None  # the client's own check says what is wrong with it
    deadline = time.monotonic() + window
    while True:
        reasons = []
        for host, port in targets:
            # An ASCII host as bytes: getaddrinfo encodes a str host with the idna codec, whose
            # import (with stringprep and unicodedata) cost a few ms of every command line; for
            # ASCII names the two are the same bytes.
            name = host.encode("ascii") if host.isascii() else host
            try:
                socket.create_connection((name, port), timeout=max(deadline - time.monotonic(), 0.05)).close()
                return None
            except ConnectionRefusedError:
                reasons.append(f"{host}:{port} refused the connection")
            except socket.gaierror as exc:
                reasons.append(f"{host}:{port}: unknown host ({exc.strerror or exc})")
            except OSError:
                return None  # unreachable or silent: a slow network is --timeout's to judge
        if time.monotonic() + _REFUSED_RETRY_S >= deadline:
            return "; ".join(reasons)
        time.sleep(_REFUSED_RETRY_S)


def client_command(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command handler: the errors a client meets become one line on stderr and exit 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from kwire.client.errors import (
            AuthenticationError,
            BrokerConnectionError,
            ClientError,
            SecurityProtocolMismatchError,
        )
        from kwire.protocol.errors import KafkaError, ProtocolError

        try:
            settings = client_settings(args)
            refused = _all_refused(settings["bootstrap.servers"], min(REFUSED_FOR_S, args.timeout))
            if refused:
                return fail(f"cannot reach the cluster at {bootstrap_of(args)}: {refused}", 1)
            return handler(args)
        except (AuthenticationError, SecurityProtocolMismatchError) as exc:
            return fail(str(exc), 1)  # not retried: the message says what to fix
        except BrokerConnectionError as exc:
            return fail(f"cannot reach the cluster at {bootstrap_of(args)}: {exc}", 1)
        except ClientError as exc:
            cause = _connection_failure(exc)
            if cause is not None:  # retried until the timeout
                return fail(f"cannot reach the cluster at {bootstrap_of(args)} within {args.timeout:g} s: {cause}", 1)
            return fail(str(exc), 1)
        except (KafkaError, ProtocolError) as exc:
            return fail(str(exc), 1)
        except BrokenPipeError:
            raise  # output piped into head(1): main() ends quietly
        except OSError as exc:  # a --config file that cannot be read
            return fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", 1)
        except ValueError as exc:  # kwire.settings.ConfigError and bad flag values
            return fail(str(exc), 1)

    return run


def open_admin(args: argparse.Namespace):
    """An ``AsyncAdmin`` configured by the flags, its calls bounded by ``--timeout``."""
    from kwire.client.admin import AsyncAdmin
    from kwire.client.config import AdminConfig

    admin = AsyncAdmin(build_config(args, AdminConfig))
    admin.default_timeout = args.timeout
    return admin
