"""MetadataResponse encode/decode: kwire against kafka-python 3.0.12, side by side in one process.

A response for 100 topics x 10 partitions (3 brokers, replicas and ISR of 3), in an old version
(v1) and a flexible one (v12).  Both libraries decode the same bytes; each encodes the object it
decoded.  Run through benchmarks/bench_protocol.py.
"""

from __future__ import annotations

import uuid
from functools import partial

from kafka.protocol.metadata import MetadataResponse as KafkaPythonMetadataResponse

from kwire.protocol import messages

TOPICS, PARTITIONS = 100, 10


def build_response() -> messages.MetadataResponse:
    r = messages.MetadataResponse
    broker, topic = r.MetadataResponseBroker, r.MetadataResponseTopic
    partition = topic.MetadataResponsePartition
    rnd = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)
    return r(
        brokers=[broker(node_id=i, host=f"broker{i}.kafka.example.com", port=9092, rack=f"rack-{i}") for i in range(3)],
        cluster_id="kwire-bench-cluster",
        controller_id=1,
        topics=[
            topic(name=f"events.topic-{t:03d}", topic_id=uuid.UUID(int=rnd.int + t), partitions=[
                partition(partition_index=p, leader_id=p % 3, leader_epoch=7, replica_nodes=[0, 1, 2],
                          isr_nodes=[0, 1, 2]) for p in range(PARTITIONS)])
            for t in range(TOPICS)
        ],
    )


def cases() -> list[tuple[str, callable, callable]]:
    """(case name, kwire function, kafka-python function); each call handles one message."""
    out = []
    response = build_response()
    for version in (1, 12):
        data = response.encode(version)
        theirs = KafkaPythonMetadataResponse.decode(data, version=version)
        # The race is only meaningful if both sides agree on the bytes.
        if theirs.encode() != data:
            raise SystemExit(f"kafka-python re-encodes MetadataResponse v{version} differently")
        label = f"MetadataResponse v{version} {TOPICS}x{PARTITIONS}"
        out.append((f"{label} decode",
                    partial(messages.MetadataResponse.decode, data, version),
                    partial(KafkaPythonMetadataResponse.decode, data, version=version)))
        out.append((f"{label} encode", partial(response.encode, version), theirs.encode))
    return out
