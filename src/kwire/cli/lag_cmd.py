"""``kwire lag``: how far a consumer group is behind, by partition and in total.

    kwire lag billing                     every partition the group committed or is assigned
    kwire lag billing --topic orders      every partition of these topics, committed or not
    kwire lag billing --json

Lag is the log end offset minus the committed offset.  A partition the group has not committed
shows ``-`` (null in JSON) for both and counts for nothing in the total.
"""

from __future__ import annotations

import argparse
import asyncio

from .client_options import add_client_options, client_command, open_admin
from .output import print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lag", help="a consumer group's lag by partition and in total",
                       description="A consumer group's committed offset, log end offset and lag for each "
                                   "partition it committed or has assigned, the member holding it, and the total.")
    p.add_argument("group", help="the consumer group")
    p.add_argument("--topic", "-t", dest="topics", action="append", metavar="TOPIC",
                   help="show every partition of this topic instead (repeatable)")
    add_client_options(p)
    p.set_defaults(func=client_command(run))


def run(args: argparse.Namespace) -> int:
    async def main():
        async with open_admin(args) as admin:
            return await admin.consumer_group_lag(args.group, topics=args.topics)

    lag = asyncio.run(main())
    rows = [{"topic": p.topic, "partition": p.partition, "committed_offset": p.committed,
             "log_end_offset": p.log_end_offset, "lag": p.lag, "member_id": p.member_id,
             "client_id": p.client_id, "host": p.host} for p in lag.partitions]
    if args.json:
        print_json({"group_id": lag.group_id, "state": lag.state, "partitions": rows, "total_lag": lag.total})
        return 0
    print(f"Group {lag.group_id!r}" + (f" ({lag.state})" if lag.state else ""))
    print()
    print_table(["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "CLIENT-ID", "HOST", "MEMBER-ID"],
                [[r["topic"], r["partition"], _dash(r["committed_offset"]), _dash(r["log_end_offset"]),
                  _dash(r["lag"]), _dash(r["client_id"]), _dash(r["host"]), _dash(r["member_id"])] for r in rows],
                align_right=[1, 2, 3, 4])
    print()
    print(f"Total lag: {lag.total}")
    return 0


def _dash(value) -> str:
    return "-" if value is None else str(value)
