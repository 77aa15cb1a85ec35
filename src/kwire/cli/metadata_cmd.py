"""``kwire metadata``: what a Metadata request says about the cluster (as ``kcat -L``).

    kwire metadata                    cluster id, controller, brokers, every topic's partitions
    kwire metadata orders payments    ... only these topics
    kwire metadata --json
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from .client_options import add_client_options, client_command, open_admin
from .output import fail, print_fields, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metadata", help="cluster id, controller, brokers, and topics with their partitions",
                       description="The cluster as a Metadata request describes it: cluster id, controller, "
                                   "brokers, and each topic's partitions with leader, replicas and isr.")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="only these topics (default: all)")
    p.add_argument("--internal", action="store_true", help="include internal topics when listing all")
    add_client_options(p)
    p.set_defaults(func=client_command(run))


def run(args: argparse.Namespace) -> int:
    from kwire.protocol.errors import KafkaError

    async def main():
        async with open_admin(args) as admin:
            return await admin.metadata(args.topics or None)

    metadata = asyncio.run(main())
    for name in args.topics:
        info = metadata.topics.get(name)
        if info is not None and info.error_code:
            error = KafkaError.for_code(info.error_code)
            return fail(f"{error(f'topic {name!r}')}", 1)
    topics = [info for name, info in sorted(metadata.topics.items())
              if args.topics or args.internal or not info.is_internal]
    document = {
        "cluster_id": metadata.cluster_id,
        "controller_id": metadata.controller_id if metadata.controller_id >= 0 else None,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in sorted(metadata.brokers.values(), key=lambda b: b.node_id)],
        "topics": [_topic(info) for info in topics],
    }
    if args.json:
        print_json(document)
        return 0
    print_fields([("Cluster id", document["cluster_id"] or "-"),
                  ("Controller", "-" if document["controller_id"] is None else document["controller_id"]),
                  ("Brokers", len(document["brokers"])), ("Topics", len(document["topics"]))])
    print()
    print_table(["BROKER", "HOST", "PORT", "RACK"],
                [[b["node_id"], b["host"], b["port"], b["rack"] or "-"] for b in document["brokers"]],
                align_right=[0, 2])
    if document["topics"]:
        print()
        print_table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "ERROR"],
                    [[t["name"], p["partition"], "none" if p["leader"] is None else p["leader"],
                      ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])), p["error"] or ""]
                     for t in document["topics"] for p in t["partitions"]],
                    align_right=[1, 2])
    return 0


def _topic(info) -> dict[str, Any]:
    from kwire.protocol.errors import error_name

    return {
        "name": info.name,
        "topic_id": str(info.topic_id) if info.topic_id.int else None,
        "internal": info.is_internal,
        "partitions": [{"partition": p.partition, "leader": p.leader if p.leader >= 0 else None,
                        "leader_epoch": p.leader_epoch, "replicas": list(p.replicas), "isr": list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                        "error": error_name(p.error_code) if p.error_code else None}
                       for p in sorted(info.partitions.values(), key=lambda p: p.partition)],
    }
