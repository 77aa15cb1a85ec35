"""``kwire configs``: describe and alter topic, broker and group configs (the jobs of kafka-configs.sh).

    kwire configs describe --topic orders              every config, its value and where it comes from
    kwire configs describe --broker                    the broker's (the one node, or --broker ID)
    kwire configs describe --broker-defaults           the cluster-wide defaults set dynamically
    kwire configs alter --topic orders --set retention.ms=86400000 --delete max.message.bytes
    kwire configs alter --broker 1 --add-config 'log.retention.ms=3600000,log.cleanup.policy=[delete,compact]'
    kwire configs alter --topic orders --append cleanup.policy=compact
    kwire configs describe --group orders-app          consumer.* / share.* configs of a group
    kwire configs alter --group orders-app --set share.record.lock.duration.ms=60000
    kwire configs alter --entity-type users --entity-name alice --add-config producer_byte_rate=1048576
    kwire configs alter --entity-type users --entity-default --entity-type clients --entity-name app \
        --set consumer_byte_rate=2097152 --delete request_percentage
    kwire configs describe --entity-type clients       client quotas of every client id (and the default)

alter sends IncrementalAlterConfigs: configs not named keep their values.  ``--add-config`` and
``--delete-config`` are kafka-configs.sh's spellings of ``--set`` and ``--delete`` (a list value in
brackets).  Client quotas (KIP-546) are named as kafka-configs.sh names them: ``--entity-type
users|clients|ips``, each followed by ``--entity-name NAME`` or ``--entity-default`` (none: describe
every entity of that type); their values are numbers, and alter sends AlterClientQuotas.  Every
subcommand takes the client flags and ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from .client_options import add_client_options, client_command, open_admin
from .output import print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="describe and alter topic and broker configs",
                       description="Describe and alter the configs of topics and brokers (kafka-configs.sh).")
    csub = p.add_subparsers(dest="configs_command", metavar="SUBCOMMAND")
    csub.required = True

    q = csub.add_parser("describe", help="configs with their values and sources",
                        description="Each config of a topic or broker: value, where it comes from, whether it "
                                    "can be changed.")
    _add_resource(q)
    q.add_argument("--overrides", action="store_true",
                   help="only the values set on this resource (what kafka-configs.sh --describe shows)")
    q.add_argument("--synonyms", action="store_true", help="also the values that would apply in turn")
    q.add_argument("--docs", action="store_true", help="also each config's type and documentation")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_describe))

    q = csub.add_parser("alter", help="set, delete, append to or subtract from configs",
                        description="Change configs of a topic or broker; the others keep their values.")
    _add_resource(q)
    q.add_argument("--set", dest="set_configs", action="append", default=[], metavar="KEY=VALUE", type=_key_value,
                   help="set a config (repeatable)")
    q.add_argument("--add-config", dest="add_configs", action="append", default=[], metavar="K=V,K=[A,B]",
                   type=_config_list, help="kafka-configs.sh's spelling of --set: comma-separated, lists in brackets")
    q.add_argument("--delete", dest="delete_configs", action="append", default=[], metavar="KEY",
                   help="remove an override: the config goes back to its default (repeatable)")
    q.add_argument("--delete-config", dest="delete_lists", action="append", default=[], metavar="K1,K2",
                   type=_names, help="kafka-configs.sh's spelling of --delete: comma-separated names")
    q.add_argument("--append", dest="append_configs", action="append", default=[], metavar="KEY=VALUE",
                   type=_key_value, help="add items to a list config such as cleanup.policy (repeatable)")
    q.add_argument("--subtract", dest="subtract_configs", action="append", default=[], metavar="KEY=VALUE",
                   type=_key_value, help="remove items from a list config (repeatable)")
    q.add_argument("--validate-only", action="store_true", help="only check that the broker would accept it")
    add_client_options(q)
    q.set_defaults(func=client_command(cmd_alter))


def _add_resource(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", "-t", metavar="NAME", help="a topic")
    which.add_argument("--broker", nargs="?", const="", metavar="ID",
                       help="a broker by node id (without ID: the broker answering, on a one-node cluster the node)")
    which.add_argument("--broker-defaults", action="store_true",
                       help="the cluster-wide broker defaults (kafka-configs.sh --entity-default)")
    which.add_argument("--group", "-g", metavar="GROUP",
                       help="a group's configs (kafka-configs.sh --entity-type groups); the group need not exist yet")
    which.add_argument("--entity-type", dest="entity_types", action="append",
                       choices=sorted({*_QUOTA_ENTITY_TYPES, *_CONFIG_ENTITY_TYPES}),
                       help="client quotas of users, client ids or ips (repeatable: users then clients), each "
                            "followed by --entity-name or --entity-default; or topics, brokers, groups with "
                            "--entity-name (kafka-configs.sh's spelling of --topic, --broker, --group)")
    parser.add_argument("--entity-name", dest="entity_names", action="append", metavar="NAME",
                        help="the entity of the --entity-type before it")
    parser.add_argument("--entity-default", dest="entity_names", action="append_const", const=_DEFAULT,
                        help="the default entity of the --entity-type before it")


# kafka-configs.sh's entity type names -> the quota entity types of KIP-546.
_QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_DEFAULT = "<default>"
# kafka-configs.sh's entity types of config resources -> this command's flag for them.
_CONFIG_ENTITY_TYPES = {"topics": "topic", "brokers": "broker", "groups": "group"}


def _config_entity(args: argparse.Namespace) -> None:
    """``--entity-type topics|brokers|groups --entity-name N`` as ``--topic/--broker/--group N``
    (``brokers --entity-default``: ``--broker-defaults``)."""
    kinds = [t for t in args.entity_types or () if t in _CONFIG_ENTITY_TYPES]
    if not kinds:
        return
    names = list(args.entity_names or [])
    if len(args.entity_types) != 1 or len(names) != 1:
        raise ValueError(f"--entity-type {kinds[0]} takes one --entity-name and no other --entity-type")
    name = names[0]
    if name == _DEFAULT:
        if kinds[0] != "brokers":
            raise ValueError(f"--entity-type {kinds[0]} has no --entity-default")
        args.broker_defaults = True
    else:
        setattr(args, _CONFIG_ENTITY_TYPES[kinds[0]], name)
    args.entity_types, args.entity_names = None, None


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def _config_list(text: str) -> list[tuple[str, str]]:
    """``a=1,b=[x,y]`` -> [("a", "1"), ("b", "x,y")]: commas inside brackets belong to the value."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            if text[start:i].strip():
                key, value = _key_value(text[start:i].strip())
                if value.startswith("[") and value.endswith("]"):
                    value = value[1:-1]
                items.append((key, value))
            start = i + 1
    if depth:
        raise argparse.ArgumentTypeError(f"{text!r}: unbalanced brackets")
    return items


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


async def _resource(admin, args: argparse.Namespace):
    """The ConfigResource the flags name (``--broker`` alone: the node answering)."""
    from kwire.client.admin import ConfigResource

    if args.topic is not None:
        return ConfigResource.topic(args.topic)
    if getattr(args, "group", None) is not None:
        return ConfigResource.group(args.group)
    if args.broker_defaults:
        return ConfigResource.broker("")
    if args.broker:
        return ConfigResource.broker(args.broker)
    cluster = await admin.describe_cluster()
    if len(cluster.brokers) != 1:
        raise ValueError(f"the cluster has {len(cluster.brokers)} brokers: name one with --broker ID")
    return ConfigResource.broker(cluster.brokers[0].node_id)


def _describe_resource(resource) -> str:
    if resource.type.name == "TOPIC":
        return f"topic {resource.name!r}"
    if resource.type.name == "GROUP":
        return f"group {resource.name!r}"
    return "the cluster-wide broker defaults" if resource.name == "" else f"broker {resource.name}"


# -- client quotas ------------------------------------------------------------------------------------
def _quota_components(args: argparse.Namespace) -> list[tuple[str, str | None | type[Ellipsis]]]:
    """(entity type, name) per --entity-type in order: a name, None for --entity-default, ... for
    none given (describe: any entity of the type)."""
    names = list(args.entity_names or [])
    if len(names) > len(args.entity_types):
        raise ValueError("more --entity-name / --entity-default than --entity-type")
    names += [...] * (len(args.entity_types) - len(names))
    return [(_QUOTA_ENTITY_TYPES[t], None if n == _DEFAULT else n) for t, n in zip(args.entity_types, names, strict=True)]


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _quota_entity_text(entity) -> str:
    return ", ".join(f"{k}={'<default>' if v is None else v}" for k, v in entity.entries)


def _describe_quotas(args: argparse.Namespace) -> int:
    from kwire.client.admin import QuotaFilter

    filters = [QuotaFilter.specified(t) if n is ... else QuotaFilter.default(t) if n is None else QuotaFilter.exact(t, n)
               for t, n in _quota_components(args)]

    async def main():
        async with open_admin(args) as admin:
            return await admin.describe_client_quotas(filters, strict=True)

    found = asyncio.run(main())
    entities = sorted(found, key=lambda e: [(k, v or "") for k, v in e.entries])
    if args.json:
        print_json({"client_quotas": [{"entity": e.as_dict(), "quotas": found[e]} for e in entities]})
        return 0
    if not entities:
        print("no client quotas match")
        return 0
    print_table(["ENTITY", "QUOTA", "VALUE"], [[_quota_entity_text(e), k, _number(v)] for e in entities
                                              for k, v in sorted(found[e].items())])
    return 0


def _alter_quotas(args: argparse.Namespace) -> int:
    from kwire.client.admin import QuotaAlteration, QuotaEntity

    components = _quota_components(args)
    if any(n is ... for _, n in components):
        raise ValueError("alter needs --entity-name or --entity-default after each --entity-type")
    if args.append_configs or args.subtract_configs:
        raise ValueError("client quotas are numbers: --append and --subtract do not apply")
    changes: dict[str, float | None] = {}
    for key, value in list(args.set_configs) + [item for group in args.add_configs for item in group]:
        try:
            changes[key] = float(value)
        except ValueError:
            raise ValueError(f"client quota {key}={value!r} is not a number") from None
    for key in list(args.delete_configs) + [n for group in args.delete_lists for n in group]:
        changes[key] = None
    if not changes:
        raise ValueError("nothing to change: give --set / --add-config or --delete / --delete-config")
    entity = QuotaEntity.of(dict(components))

    async def main():
        async with open_admin(args) as admin:
            await admin.alter_client_quotas([QuotaAlteration(entity, changes)], validate_only=args.validate_only)

    asyncio.run(main())
    if args.json:
        print_json({"entity": entity.as_dict(), "validate_only": args.validate_only, "changes": changes})
        return 0
    verb = "would alter" if args.validate_only else "altered"
    print(f"{verb} client quotas of {_quota_entity_text(entity)}: "
          + ", ".join(f"{k}={_number(v)}" if v is not None else f"{k} removed" for k, v in changes.items()))
    return 0


# -- describe -----------------------------------------------------------------------------------------
def cmd_describe(args: argparse.Namespace) -> int:
    _config_entity(args)
    if args.entity_types:
        return _describe_quotas(args)

    async def main():
        async with open_admin(args) as admin:
            resource = await _resource(admin, args)
            found = await admin.describe_configs([resource], include_synonyms=True, include_documentation=args.docs)
            return resource, found[resource]

    resource, entries = asyncio.run(main())
    rows = [_entry_document(e) for e in sorted(entries.values(), key=lambda e: e.name)]
    if args.overrides:  # a topic's or group's own values; a broker's dynamic ones (kafka-configs.sh --describe)
        own = {"TOPIC": ("DYNAMIC_TOPIC_CONFIG",), "GROUP": ("GROUP_CONFIG",)}.get(
            resource.type.name, ("DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG"))
        rows = [r for r in rows if r["source"] in own]
    if args.json:
        print_json({"resource": {"type": resource.type.name.lower(), "name": resource.name}, "configs": rows})
        return 0
    if not rows:
        print(f"no {'dynamic ' if args.overrides else ''}configs for {_describe_resource(resource)}")
        return 0
    headers = ["CONFIG", "VALUE", "SOURCE", "READ-ONLY"]
    table = [[r["name"], _shown(r["value"], r["sensitive"]), _source(r["source"]), "yes" if r["read_only"] else "no"]
             for r in rows]
    if args.synonyms:
        headers.append("SYNONYMS")
        for row, r in zip(table, rows, strict=True):
            row.append("; ".join(f"{s['name']}={_shown(s['value'], r['sensitive'])} ({_source(s['source'])})"
                                 for s in r["synonyms"][1:]) or "-")
    if args.docs:
        headers += ["TYPE", "DOCUMENTATION"]
        for row, r in zip(table, rows, strict=True):
            row += [r["type"] or "-", r["documentation"] or "-"]
    print_table(headers, table)
    return 0


def _entry_document(e) -> dict[str, Any]:
    from kwire.protocol.configs import ConfigType

    kind = ConfigType(e.config_type).name.lower() if e.config_type in ConfigType._value2member_map_ else None
    return {"name": e.name, "value": e.value, "source": e.source.name, "read_only": e.read_only,
            "sensitive": e.sensitive, "synonyms": [{"name": s.name, "value": s.value, "source": s.source.name}
                                                   for s in e.synonyms],
            "type": kind if e.config_type else None, "documentation": e.documentation}


def _shown(value: str | None, sensitive: bool) -> str:
    if value is None:
        return "(sensitive)" if sensitive else "(null)"
    return value if value != "" else '""'


def _source(name: str) -> str:
    return name.lower().replace("_config", "").replace("_", "-")


# -- alter ------------------------------------------------------------------------------------------
def cmd_alter(args: argparse.Namespace) -> int:
    from kwire.client.admin import ConfigChange

    _config_entity(args)
    if args.entity_types:
        return _alter_quotas(args)

    sets = list(args.set_configs) + [item for group in args.add_configs for item in group]
    deletes = list(args.delete_configs) + [n for group in args.delete_lists for n in group]
    changes = ([ConfigChange.set(k, v) for k, v in sets] + [ConfigChange.delete(k) for k in deletes]
               + [ConfigChange.append(k, v) for k, v in args.append_configs]
               + [ConfigChange.subtract(k, v) for k, v in args.subtract_configs])
    if not changes:
        raise ValueError("nothing to change: give --set, --delete, --append or --subtract")

    async def main():
        async with open_admin(args) as admin:
            resource = await _resource(admin, args)
            await admin.incremental_alter_configs({resource: changes}, validate_only=args.validate_only)
            return resource

    resource = asyncio.run(main())
    if args.json:
        print_json({"resource": {"type": resource.type.name.lower(), "name": resource.name},
                    "validate_only": args.validate_only,
                    "changes": [{"op": c.op.name.lower(), "name": c.name, "value": c.value} for c in changes]})
        return 0
    verb = "would alter" if args.validate_only else "altered"
    print(f"{verb} {_describe_resource(resource)}: {', '.join(_change_text(c) for c in changes)}")
    return 0


def _change_text(change) -> str:
    op = change.op.name
    if op == "SET":
        return f"{change.name}={change.value}"
    if op == "DELETE":
        return f"{change.name} back to its default"
    return f"{change.value} {'appended to' if op == 'APPEND' else 'subtracted from'} {change.name}"
