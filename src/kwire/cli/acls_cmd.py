"""``kwire acls``: the broker's ACLs, through a running broker or offline in its data directory.

    kwire acls add --allow --principal User:alice --operation READ --operation DESCRIBE --topic orders
    kwire acls add --allow --principal User:alice --operation ALL --topic app- --prefixed
    kwire acls add --deny --principal User:mallory --operation ALL --topic '*'
    kwire acls add --allow --principal User:alice --operation READ --group billing
    kwire acls remove --principal User:alice --topic orders
    kwire acls list [--principal User:alice] [--topic orders] [--json]

Where the ACLs are, chosen once per command and never guessed from what answers:

* online, when a bootstrap is given (``--bootstrap``, or ``$KWIRE_BOOTSTRAP``): CreateAcls,
  DescribeAcls and DeleteAcls through ``kwire.client.admin.Admin``, with the client options every
  cluster command takes (``-X``, ``--client-config FILE``, ``--timeout``, the TLS / SASL flags and
  their ``KWIRE_*`` variables; ``--config`` names the broker's TOML here, as for ``kwire users``).
  The logged-in principal needs ALTER on the cluster to add or remove, DESCRIBE to list (or to be
  a super user); a broker without an authorizer answers SECURITY_DISABLED.
* offline, with ``--data-dir`` / ``--config`` (the broker's TOML), or when no bootstrap is given:
  ``<data dir>/__kwire/acls.json``, as before (no broker needed; a running broker picks changes up
  at its next request).  The data dir is found as for ``kwire users``.

``--bootstrap`` with ``--data-dir`` or ``--config`` is refused, and so are client options without
a bootstrap.  ``$KWIRE_BOOTSTRAP`` is ambient (exported for everyday use), so an explicit
``--data-dir`` / ``--config`` overrides it rather than clashing with it.  Output (lines, the table,
``--json``) is the same either way.

ACLs are enforced by a broker running with ``authorizer = true`` (``kwire broker --authorizer``); then
a resource without ACLs is refused to everyone but super users.
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from kwire.broker.auth.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclStore,
    PatternType,
    PermissionType,
    ResourceType,
)
from kwire.broker.config import ConfigError

from .client_options import (
    BOOTSTRAP_ENV,
    DEFAULT_TIMEOUT,
    SECURITY_OPTIONS,
    add_client_options,
    build_config,
    client_command,
)
from .output import fail, print_json, print_table
from .users_cmd import data_dir_of

_OPERATIONS = [op.name for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]


def _operation(text: str) -> AclOperation:
    name = text.strip().upper().replace("-", "_")
    if name not in _OPERATIONS and name != "ANY":
        raise argparse.ArgumentTypeError(f"unknown operation {text!r} (one of {', '.join(_OPERATIONS)})")
    return AclOperation[name]


def _resource_options(q: argparse.ArgumentParser, *, filtering: bool) -> None:
    verb = "match" if filtering else "apply to"
    q.add_argument("--topic", dest="topics", action="append", default=[], metavar="NAME",
                   help=f"ACLs that {verb} this topic ('*': every topic; repeatable)")
    q.add_argument("--group", dest="groups", action="append", default=[], metavar="NAME",
                   help=f"ACLs that {verb} this consumer group (repeatable)")
    q.add_argument("--transactional-id", dest="transactional_ids", action="append", default=[], metavar="ID",
                   help=f"ACLs that {verb} this transactional id (repeatable)")
    q.add_argument("--cluster", action="store_true", help=f"ACLs that {verb} the cluster")
    patterns = ["literal", "prefixed"] + (["any", "match"] if filtering else [])
    q.add_argument("--resource-pattern-type", choices=patterns, default="any" if filtering else "literal",
                   help="how resource names match: literal (the default for add), prefixed"
                        + (", any (the default here) or match (the ACLs that apply to the name)" if filtering
                           else ""))
    q.add_argument("--prefixed", dest="resource_pattern_type", action="store_const", const="prefixed",
                   help="short for --resource-pattern-type prefixed")


_MODES = (
    "Online or offline: with --bootstrap (or $KWIRE_BOOTSTRAP) the ACLs are managed through the running broker "
    "(CreateAcls / DescribeAcls / DeleteAcls, logged in with the client options below; the principal needs ALTER, "
    "or DESCRIBE to list, on the cluster). With --data-dir or --config (the broker's TOML), or without a bootstrap, "
    "they are managed in the broker's data directory: no broker needed. --bootstrap with --data-dir/--config is "
    "refused, as are client options without a bootstrap; --data-dir/--config win over $KWIRE_BOOTSTRAP.")

# The attributes add_client_options fills in, with the flag that sets each (for the messages);
# the security flags' dests follow client_options' naming, "security_" + the Kafka name.
_CLIENT_FLAGS = {"settings": "-X", "config_file": "--client-config", "timeout": "--timeout"} | {
    "security_" + key.replace(".", "_"): flag for key, (flag, _, _) in SECURITY_OPTIONS.items() if flag}


def _mode_options(q: argparse.ArgumentParser) -> None:
    """The offline flags (as ``kwire users`` has them) and the online ones (as every cluster command)."""
    offline = q.add_argument_group("offline (the broker's data directory)")
    offline.add_argument("--data-dir", type=Path, help="the broker's data directory (default ./kwire-data)")
    offline.add_argument("--config", type=Path, metavar="FILE", help="take the data directory from this broker TOML")
    # --config is the broker's TOML here (as for kwire users): the client properties file moves aside.
    # Here no bootstrap means offline, not localhost:9092.
    add_client_options(q, json_output=False, config_flag="--client-config", bootstrap_help=(
        f"a broker to manage the ACLs through (default ${BOOTSTRAP_ENV}); without one, the data directory"))
    # None, not 30: to tell an explicit --timeout (which needs a bootstrap) from no flag at all.
    q.set_defaults(timeout=None)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="manage the broker's ACLs (online with --bootstrap, else in its data dir)",
                       description="Add, remove and list the ACLs kwire's broker enforces when it runs with "
                                   "authorizer = true. " + _MODES)
    asub = p.add_subparsers(dest="acls_command", metavar="SUBCOMMAND")
    asub.required = True

    q = asub.add_parser("add", help="allow or deny operations to principals",
                        description="Add an ACL for every principal x operation x resource given. " + _MODES)
    permission = q.add_mutually_exclusive_group()
    permission.add_argument("--allow", dest="permission", action="store_const", const="ALLOW", default="ALLOW",
                            help="allow (the default)")
    permission.add_argument("--deny", dest="permission", action="store_const", const="DENY",
                            help="deny (a deny wins over any allow)")
    q.add_argument("--principal", dest="principals", action="append", required=True, metavar="PRINCIPAL",
                   help="User:name, or User:* for everyone (repeatable)")
    q.add_argument("--operation", dest="operations", action="append", required=True, type=_operation,
                   metavar="OP", help=f"{', '.join(_OPERATIONS)} (repeatable)")
    q.add_argument("--host", default="*", help="client host the ACL applies to (default *: any)")
    _resource_options(q, filtering=False)
    _mode_options(q)
    q.set_defaults(func=cmd_add)

    for name, help_text in (("remove", "delete the ACLs matching the filters"),
                            ("list", "the ACLs matching the filters (all by default)")):
        q = asub.add_parser(name, help=help_text,
                            description=help_text[0].upper() + help_text[1:] + ". " + _MODES)
        q.add_argument("--principal", dest="principals", action="append", default=[], metavar="PRINCIPAL",
                       help="only ACLs of this principal (repeatable)")
        q.add_argument("--operation", dest="operations", action="append", default=[], type=_operation,
                       metavar="OP", help="only ACLs of this operation (repeatable)")
        q.add_argument("--host", help="only ACLs for this host")
        q.add_argument("--allow", dest="permission", action="store_const", const="ALLOW", help="only ALLOW ACLs")
        q.add_argument("--deny", dest="permission", action="store_const", const="DENY", help="only DENY ACLs")
        _resource_options(q, filtering=True)
        if name == "list":
            q.add_argument("--json", action="store_true", help="a JSON document instead of a table")
        _mode_options(q)
        q.set_defaults(func=cmd_remove if name == "remove" else cmd_list)


# -- online or offline ----------------------------------------------------------------------------------------
class _UsageError(Exception):
    """Flags that contradict each other: exit 2, as argparse's own usage errors."""


def _online(args: argparse.Namespace) -> bool:
    """Whether the command goes to a broker (True) or to the data directory (False)."""
    offline = [flag for flag, value in (("--data-dir", args.data_dir), ("--config", args.config)) if value is not None]
    client = [flag for dest, flag in _CLIENT_FLAGS.items() if getattr(args, dest, None) not in (None, [])]
    if args.bootstrap and offline:
        raise _UsageError(f"--bootstrap works through a running broker, {' and '.join(offline)} on its data "
                          "directory offline: give one or the other")
    if offline:
        if client:
            raise _UsageError(f"{', '.join(client)} only apply online (with --bootstrap), not with "
                              f"{' and '.join(offline)}")
        return False  # an explicit data dir wins over an ambient $KWIRE_BOOTSTRAP
    if args.bootstrap or os.environ.get(BOOTSTRAP_ENV):
        return True
    if client:
        raise _UsageError(f"{', '.join(client)} need a broker: give --bootstrap (or set ${BOOTSTRAP_ENV}), or "
                          "drop them to work on the data directory")
    return False


class _Acls(Protocol):
    """Where the ACLs are: the two backends answer alike, so the commands print alike."""

    def add(self, bindings: list[AclBinding]) -> None: ...

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]: ...

    def find(self, filters: list[AclFilter]) -> list[AclBinding]: ...

    def close(self) -> None: ...


def _unique(found: Iterable[list[AclBinding]]) -> list[AclBinding]:
    """The bindings of all filters, each once, in the order first seen (two filters may match one)."""
    return list(dict.fromkeys(b for bindings in found for b in bindings))


class _Offline:
    def __init__(self, args: argparse.Namespace):
        self._store = AclStore(data_dir_of(args))

    def add(self, bindings: list[AclBinding]) -> None:
        self._store.add(bindings)

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        return _unique(self._store.remove(filters))

    def find(self, filters: list[AclFilter]) -> list[AclBinding]:
        # Sorted like the online answers (the file is sorted already; this keeps both alike for sure).
        return sorted(b for b in self._store.bindings() if any(f.matches(b) for f in filters))

    def close(self) -> None:
        pass


class _Online:
    def __init__(self, args: argparse.Namespace):
        from kwire.client.admin import Admin
        from kwire.client.config import AdminConfig

        self._admin = Admin(build_config(args, AdminConfig))
        self._timeout: float = args.timeout

    def add(self, bindings: list[AclBinding]) -> None:
        self._admin.create_acls(bindings, timeout=self._timeout)

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        return _unique(self._admin.delete_acls(filters, timeout=self._timeout).values())

    def find(self, filters: list[AclFilter]) -> list[AclBinding]:
        # DescribeAcls takes one filter: one request per filter, the union sorted as offline.
        found: set[AclBinding] = set()
        for f in dict.fromkeys(filters):
            found.update(self._admin.describe_acls(f, timeout=self._timeout))
        return sorted(found)

    def close(self) -> None:
        self._admin.close()


def _run(args: argparse.Namespace, command: Callable[[argparse.Namespace, _Acls], int]) -> int:
    """Run ``command`` on the backend the flags choose.  Offline failures exit 2 as they always
    did; online ones go through client_command, like every cluster command's (exit 1, one line)."""
    try:
        online = _online(args)
    except _UsageError as exc:
        return fail(str(exc))
    if not online:
        try:
            acls = _Offline(args)
            try:
                return command(args, acls)
            finally:
                acls.close()
        except BrokenPipeError:
            raise  # output piped into head(1): main() ends quietly
        except (ConfigError, ValueError, OSError) as exc:
            return fail(str(exc))
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT

    def with_admin(args: argparse.Namespace) -> int:
        acls = _Online(args)
        try:
            return command(args, acls)
        finally:
            acls.close()

    return client_command(with_admin)(args)


# -- the commands -----------------------------------------------------------------------------------------
def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in args.topics] + [(ResourceType.GROUP, g) for g in args.groups]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_ids]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def cmd_add(args: argparse.Namespace) -> int:
    resources = _resources(args)
    if not resources:
        return fail("name a resource: --topic, --group, --transactional-id or --cluster")
    if any(op == AclOperation.ANY for op in args.operations):
        return fail("ANY is a filter, not an operation: use ALL for every operation")
    pattern = PatternType[args.resource_pattern_type.upper()]
    bindings = [AclBinding(rtype, name, PatternType.LITERAL if rtype == ResourceType.CLUSTER else pattern,
                           principal, args.host, op, PermissionType[args.permission])
                for (rtype, name), principal, op in itertools.product(resources, args.principals, args.operations)]
    return _run(args, lambda args, acls: _add(acls, bindings))


def _add(acls: _Acls, bindings: list[AclBinding]) -> int:
    acls.add(bindings)
    for b in bindings:
        print(f"added: {b.describe()}")
    return 0


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    pattern = PatternType[args.resource_pattern_type.upper()]
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args)) or [(ResourceType.ANY, None)]
    principals: list[str | None] = list(args.principals) or [None]
    operations = list(args.operations) or [AclOperation.ANY]
    permission = PermissionType[args.permission] if args.permission else PermissionType.ANY
    return [AclFilter(rtype, name, pattern if rtype != ResourceType.CLUSTER else PatternType.ANY, principal,
                      args.host, op, permission)
            for (rtype, name), principal, op in itertools.product(resources, principals, operations)]


def _document(b: AclBinding) -> dict:
    return {"resource_type": b.resource_type.name, "name": b.name, "pattern_type": b.pattern.name,
            "principal": b.principal, "host": b.host, "operation": b.operation.name, "permission": b.permission.name}


def cmd_remove(args: argparse.Namespace) -> int:
    if not (_resources(args) or args.principals):
        return fail("name what to remove: a resource (--topic, --group, --transactional-id, --cluster) "
                    "and/or --principal")
    return _run(args, _remove)


def _remove(args: argparse.Namespace, acls: _Acls) -> int:
    gone = acls.remove(_filters(args))
    for b in gone:
        print(f"removed: {b.describe()}")
    if not gone:
        print("no ACL matched")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    return _run(args, _list)


def _list(args: argparse.Namespace, acls: _Acls) -> int:
    found = acls.find(_filters(args))
    if args.json:
        print_json({"acls": [_document(b) for b in found]})
        return 0
    print_table(["PERMISSION", "PRINCIPAL", "OPERATION", "RESOURCE", "NAME", "PATTERN", "HOST"],
                [[b.permission.name, b.principal, b.operation.name, b.resource_type.name, b.name, b.pattern.name,
                  b.host] for b in found])
    return 0
