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

Precedence, lowest first: the default bootstrap, ``--config``, ``-X`` (later ones win),
``--bootstrap``.  ``client_settings(args)`` returns the merged dotted settings.

``client_command(handler)`` wraps a handler so that configuration errors, broker error codes,
unreachable clusters and timeouts end as one line on stderr (``kwire: error: ...``) and exit
status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from .output import fail

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_TIMEOUT",
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


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key.strip(), value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the timeout must be positive, not {text}")
    return value


def add_client_options(parser: argparse.ArgumentParser, *, json_output: bool = True,
                       config_flag: str = "--config") -> None:
    """Add --bootstrap, -X, --config, --timeout (and --json unless ``json_output`` is False).

    ``config_flag`` renames --config for a command that needs that flag for something else.
    """
    group = parser.add_argument_group("cluster connection")
    group.add_argument("-b", "--bootstrap", metavar="HOST:PORT[,...]",
                       help=f"bootstrap servers (default ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})")
    group.add_argument("-X", dest="settings", metavar="KEY=VALUE", type=_key_value, action="append", default=[],
                       help="a client setting by its Kafka name, e.g. -X client.id=me (repeatable)")
    group.add_argument(config_flag, dest="config_file", metavar="FILE",
                       help="a Java .properties file of client settings")
    group.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                       help=f"how long to wait for the cluster (default {DEFAULT_TIMEOUT:g})")
    if json_output:
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout instead of tables")


def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The client settings the flags give, by Kafka's dotted names, merged by precedence."""
    settings: dict[str, Any] = {"bootstrap.servers": os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP}
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
    timeout_ms = int(args.timeout * 1000)
    settings.setdefault("request.timeout.ms", timeout_ms)
    settings.setdefault("socket.connection.setup.timeout.ms", min(timeout_ms, 10_000))
    return settings


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


def client_command(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command handler: the errors a client meets become one line on stderr and exit 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from kwire.client.errors import BrokerConnectionError, ClientError
        from kwire.protocol.errors import KafkaError, ProtocolError

        try:
            return handler(args)
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
