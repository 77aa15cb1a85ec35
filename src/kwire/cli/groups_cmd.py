"""``kwire groups``: list, describe and delete consumer groups.

    kwire groups list                     every group with protocol type and state
    kwire groups list --state Stable
    kwire groups describe billing         state, assignor, members and their partitions
    kwire groups delete billing reports   (only groups without members)

Every subcommand takes the client flags (``--bootstrap``, ``-X``, ``--config``, ``--timeout``)
and ``--json``.  ``kwire lag GROUP`` shows how far a group is behind.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable
from typing import Any

from .client_options import add_client_options, client_command, open_admin
from .output import print_fields, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe and delete consumer groups",
                       description="Inspect and delete a Kafka cluster's consumer groups.")
    gsub = p.add_subparsers(dest="groups_command", metavar="SUBCOMMAND")
    gsub.required = True

    q = gsub.add_parser("list", help="every group with its protocol type and state",
                        description="Every group the brokers coordinate, with its protocol type, and its state "
                                    "and type where the brokers' ListGroups version gives them.")
    q.add_argument("--state", dest="states", action="append", default=[], metavar="STATE",
                   help="only groups in this state (Stable, Empty, PreparingRebalance...; repeatable)")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_list))

    q = gsub.add_parser("describe", help="a group's state, assignor, members and their partitions",
                        description="A group's state, protocol type, assignor (protocol), coordinator, and its "
                                    "members with client id, host and assigned partitions. (Kafka's protocol "
                                    "does not say which member leads the group.)")
    q.add_argument("groups", nargs="+", metavar="GROUP", help="groups to describe")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_describe))

    q = gsub.add_parser("delete", help="delete groups and their committed offsets",
                        description="Delete groups with their committed offsets. A group with members "
                                    "cannot be deleted.")
    q.add_argument("groups", nargs="+", metavar="GROUP", help="groups to delete")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_delete))


# -- list -------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    async def main():
        async with open_admin(args) as admin:
            return await admin.list_groups(states=args.states)

    listings = asyncio.run(main())
    rows = [{"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state, "type": g.type,
             "coordinator": g.coordinator} for g in listings]
    if args.json:
        print_json({"groups": rows})
        return 0
    print_table(["GROUP", "PROTOCOL-TYPE", "STATE", "TYPE", "COORDINATOR"],
                [[r["group_id"], r["protocol_type"] or "-", r["state"] or "-", r["type"] or "-", r["coordinator"]]
                 for r in rows], align_right=[4])
    return 0


# -- describe ---------------------------------------------------------------------------------------
def cmd_describe(args: argparse.Namespace) -> int:
    group_ids = list(dict.fromkeys(args.groups))

    async def main():
        async with open_admin(args) as admin:
            return await admin.describe_groups(group_ids)

    described = asyncio.run(main())
    documents = [_group_document(described[g]) for g in group_ids]
    if args.json:
        print_json({"groups": documents})
        return 0
    for i, doc in enumerate(documents):
        if i:
            print()
        print_fields([("Group", doc["group_id"]), ("State", doc["state"]),
                      ("Protocol type", doc["protocol_type"] or "-"), ("Assignor", doc["assignor"] or "-"),
                      ("Coordinator", doc["coordinator"]), ("Members", len(doc["members"]))])
        if doc["members"]:
            print()
            print_table(["CLIENT-ID", "HOST", "INSTANCE-ID", "ASSIGNMENT", "MEMBER-ID"],
                        [[m["client_id"], m["host"], m["group_instance_id"] or "-",
                          format_partitions(m["assignment"]), m["member_id"]] for m in doc["members"]])
    return 0


def _group_document(g) -> dict[str, Any]:
    return {
        "group_id": g.group_id,
        "state": g.state,
        "protocol_type": g.protocol_type,
        "assignor": g.protocol or None,
        "coordinator": g.coordinator,
        "members": [{
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "subscription": None if m.subscription is None else list(m.subscription),
            "assignment": None if m.assignment is None else [{"topic": t, "partition": p}
                                                               for t, p in sorted(m.assignment)],
        } for m in sorted(g.members, key=lambda m: (m.client_id, m.member_id))],
    }


def format_partitions(assignment: Iterable[dict[str, Any]] | None) -> str:
    """``orders:0,1,2 payments:3`` from a list of {"topic", "partition"}; "-" for none or unknown."""
    if not assignment:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp["topic"], []).append(tp["partition"])
    return " ".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))


# -- delete -----------------------------------------------------------------------------------------
def cmd_delete(args: argparse.Namespace) -> int:
    group_ids = list(dict.fromkeys(args.groups))

    async def main():
        async with open_admin(args) as admin:
            await admin.delete_groups(group_ids)

    asyncio.run(main())
    if args.json:
        print_json({"deleted": group_ids})
    else:
        for g in group_ids:
            print(f"deleted group {g!r}")
    return 0
