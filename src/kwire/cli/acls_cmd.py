"""``kwire acls``: the broker's ACLs, kept in its data directory (no broker needed).

    kwire acls add --allow --principal User:alice --operation READ --operation DESCRIBE --topic orders
    kwire acls add --allow --principal User:alice --operation ALL --topic app- --prefixed
    kwire acls add --deny --principal User:mallory --operation ALL --topic '*'
    kwire acls add --allow --principal User:alice --operation READ --group billing
    kwire acls remove --principal User:alice --topic orders
    kwire acls list [--principal User:alice] [--topic orders] [--json]

ACLs are enforced by a broker running with ``authorizer = true`` (``kwire broker --authorizer``); then
a resource without ACLs is refused to everyone but super users. A running broker picks changes up at
its next request. Files: ``<data dir>/__kwire/acls.json``; the data dir is found as for ``kwire users``.
"""

from __future__ import annotations

import argparse
import itertools

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

from .output import fail, print_json, print_table
from .users_cmd import add_data_dir_options, data_dir_of

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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="manage the broker's ACLs (offline, in its data dir)",
                       description="Add, remove and list the ACLs kwire's broker enforces when it runs with "
                                   "authorizer = true. Works on the data directory: no broker needed, and a "
                                   "running broker sees changes at its next request.")
    asub = p.add_subparsers(dest="acls_command", metavar="SUBCOMMAND")
    asub.required = True

    q = asub.add_parser("add", help="allow or deny operations to principals",
                        description="Add an ACL for every principal x operation x resource given.")
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
    add_data_dir_options(q)
    q.set_defaults(func=cmd_add)

    for name, help_text in (("remove", "delete the ACLs matching the filters"),
                            ("list", "the ACLs matching the filters (all by default)")):
        q = asub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
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
        add_data_dir_options(q)
        q.set_defaults(func=cmd_remove if name == "remove" else cmd_list)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in args.topics] + [(ResourceType.GROUP, g) for g in args.groups]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_ids]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _store(args: argparse.Namespace) -> AclStore:
    return AclStore(data_dir_of(args))


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
    try:
        _store(args).add(bindings)
    except (ConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
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
    try:
        removed = _store(args).remove(_filters(args))
    except (ConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
    gone = list(dict.fromkeys(b for found in removed for b in found))
    for b in gone:
        print(f"removed: {b.describe()}")
    if not gone:
        print("no ACL matched")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        filters = _filters(args)
        found = [b for b in store.bindings() if any(f.matches(b) for f in filters)]
    except (ConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
    if args.json:
        print_json({"acls": [_document(b) for b in found]})
        return 0
    print_table(["PERMISSION", "PRINCIPAL", "OPERATION", "RESOURCE", "NAME", "PATTERN", "HOST"],
                [[b.permission.name, b.principal, b.operation.name, b.resource_type.name, b.name, b.pattern.name,
                  b.host] for b in found])
    return 0
