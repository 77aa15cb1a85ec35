"""``kwire topics``: list, create, delete and describe a cluster's topics.

    kwire topics list                                  names, partition counts, replication, ids
    kwire topics create orders --partitions 6 --config retention.ms=86400000
    kwire topics describe orders                       partitions with leader, replicas, isr
    kwire topics describe orders --configs             ... and the topic's config values
    kwire topics delete orders payments

Every subcommand takes the client flags (``--bootstrap``, ``-X``, ``--config``, ``--timeout``)
and ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from .client_options import add_client_options, client_command, open_admin
from .output import print_fields, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topics", help="list, create, delete and describe topics",
                       description="Manage a Kafka cluster's topics.")
    tsub = p.add_subparsers(dest="topics_command", metavar="SUBCOMMAND")
    tsub.required = True

    q = tsub.add_parser("list", help="every topic with its partition count",
                        description="Every topic with its partition count, replication factor and id.")
    q.add_argument("--internal", action="store_true", help="include internal topics (__consumer_offsets...)")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_list))

    q = tsub.add_parser("create", help="create a topic", description="Create a topic.")
    q.add_argument("name", help="the topic's name")
    q.add_argument("--partitions", "-p", type=int, default=-1, metavar="N",
                   help="number of partitions (default: the broker's)")
    q.add_argument("--replication-factor", "-r", type=int, default=-1, metavar="R",
                   help="copies of each partition (default: the broker's)")
    q.add_argument("--config", "-c", dest="topic_configs", action="append", default=[], metavar="KEY=VALUE",
                   type=_topic_config, help="a topic config, e.g. retention.ms=86400000 (repeatable)")
    q.add_argument("--validate-only", action="store_true", help="only check that the broker would create it")
    q.add_argument("--if-not-exists", action="store_true", help="succeed when the topic exists already")
    # --config is the topic's here, as in kafka-topics.sh: the properties file moves aside.
    add_client_options(q, config_flag="--client-config")
    q.set_defaults(func=client_command(cmd_create))

    q = tsub.add_parser("delete", help="delete topics", description="Delete topics and all their records.")
    q.add_argument("names", nargs="+", metavar="NAME", help="topics to delete")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_delete))

    q = tsub.add_parser("describe", help="partitions, leaders, replicas and isr of topics",
                        description="Each topic's partitions with leader, replicas and in-sync replicas.")
    q.add_argument("names", nargs="+", metavar="NAME", help="topics to describe")
    q.add_argument("--configs", action="store_true", help="also show each topic's config values")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_describe))


def _topic_config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def _replication(info) -> int:
    return max((len(p.replicas) for p in info.partitions.values()), default=0)


def _topic_id(info) -> str | None:
    return str(info.topic_id) if info.topic_id.int else None


# -- list -------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    async def main():
        async with open_admin(args) as admin:
            return await admin.list_topics(include_internal=args.internal)

    topics = asyncio.run(main())
    rows = [{"name": name, "topic_id": _topic_id(info), "partitions": len(info.partitions),
             "replication_factor": _replication(info), "internal": info.is_internal}
            for name, info in topics.items()]
    if args.json:
        print_json({"topics": rows})
        return 0
    print_table(["TOPIC", "PARTITIONS", "REPLICATION", "INTERNAL", "TOPIC-ID"],
                [[r["name"], r["partitions"], r["replication_factor"], "yes" if r["internal"] else "no",
                  r["topic_id"] or "-"] for r in rows], align_right=[1, 2])
    return 0


# -- create -----------------------------------------------------------------------------------------
def cmd_create(args: argparse.Namespace) -> int:
    from kwire.client.admin import NewTopic
    from kwire.protocol.errors import TopicAlreadyExistsError

    spec = NewTopic(args.name, args.partitions, args.replication_factor, dict(args.topic_configs))

    async def main():
        async with open_admin(args) as admin:
            try:
                return (await admin.create_topics([spec], validate_only=args.validate_only))[args.name]
            except TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise
                return None

    created = asyncio.run(main())
    # The same keys either way; null where the broker's answer did not say (or nothing was created).
    document: dict[str, Any] = {"name": args.name, "created": False, "exists": created is None,
                                "validate_only": args.validate_only, "topic_id": None, "partitions": None,
                                "replication_factor": None, "configs": None}
    if created is None:
        text = f"topic {args.name!r} exists already"
    else:
        document.update(
            created=not args.validate_only,
            topic_id=str(created.topic_id) if created.topic_id else None,
            partitions=created.num_partitions if created.num_partitions >= 0 else None,
            replication_factor=created.replication_factor if created.replication_factor >= 0 else None,
            configs=dict(created.configs))
        counts = ""
        if created.num_partitions >= 0:
            counts = f": {created.num_partitions} partitions, replication factor {created.replication_factor}"
        text = (f"topic {args.name!r} can be created{counts} (validate only)" if args.validate_only
                else f"created topic {args.name!r}{counts}")
    if args.json:
        print_json(document)
    else:
        print(text)
    return 0


# -- delete -----------------------------------------------------------------------------------------
def cmd_delete(args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.names))

    async def main():
        async with open_admin(args) as admin:
            await admin.delete_topics(names)

    asyncio.run(main())
    if args.json:
        print_json({"deleted": names})
    else:
        for name in names:
            print(f"deleted topic {name!r}")
    return 0


# -- describe ---------------------------------------------------------------------------------------
def cmd_describe(args: argparse.Namespace) -> int:
    from kwire.client.admin import ConfigResource

    names = list(dict.fromkeys(args.names))

    async def main():
        async with open_admin(args) as admin:
            topics = await admin.describe_topics(names)
            configs = {}
            if args.configs:
                found = await admin.describe_configs([ConfigResource.topic(n) for n in names])
                configs = {r.name: entries for r, entries in found.items()}
            return topics, configs

    topics, configs = asyncio.run(main())
    documents = [_topic_document(topics[n], configs.get(n)) for n in names]
    if args.json:
        print_json({"topics": documents})
        return 0
    for i, doc in enumerate(documents):
        if i:
            print()
        print_fields([("Topic", doc["name"]), ("Topic id", doc["topic_id"] or "-"),
                      ("Partitions", len(doc["partitions"])), ("Replication", doc["replication_factor"]),
                      ("Internal", "yes" if doc["internal"] else "no")])
        print()
        print_table(["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE"],
                    [[p["partition"], _node(p["leader"]), p["leader_epoch"], _nodes(p["replicas"]), _nodes(p["isr"]),
                      _nodes(p["offline_replicas"]) or "-"] for p in doc["partitions"]],
                    align_right=[0, 1, 2])
        if doc["configs"] is not None:
            print()
            print_table(["CONFIG", "VALUE", "SOURCE", "READ-ONLY", "SENSITIVE"],
                        [[c["name"], "(sensitive)" if c["sensitive"] and c["value"] is None else c["value"],
                          c["source"].lower(), "yes" if c["read_only"] else "no", "yes" if c["sensitive"] else "no"]
                         for c in doc["configs"]])
    return 0


def _topic_document(info, configs) -> dict[str, Any]:
    partitions = [{"partition": p.partition, "leader": p.leader if p.leader >= 0 else None,
                   "leader_epoch": p.leader_epoch, "replicas": list(p.replicas), "isr": list(p.isr),
                   "offline_replicas": list(p.offline_replicas)}
                  for p in sorted(info.partitions.values(), key=lambda p: p.partition)]
    doc: dict[str, Any] = {"name": info.name, "topic_id": _topic_id(info), "internal": info.is_internal,
                           "replication_factor": _replication(info), "partitions": partitions, "configs": None}
    if configs is not None:
        doc["configs"] = [{"name": e.name, "value": e.value, "source": e.source.name, "is_default": e.is_default,
                           "read_only": e.read_only, "sensitive": e.sensitive}
                          for e in sorted(configs.values(), key=lambda e: e.name)]
    return doc


def _node(node_id: int | None) -> str:
    return "none" if node_id is None else str(node_id)


def _nodes(ids: list[int]) -> str:
    return ",".join(map(str, ids))
