"""KIP-430 through Metadata: a client asking for a topic's authorized operations gets them
computed from the ACLs (confluent-kafka's describe_topics asks through Metadata), and a client
not asking gets Kafka's "not computed" value."""

from __future__ import annotations

import confluent_kafka
from confluent_kafka.admin import AdminClient

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers.common import NO_AUTHORIZED_OPERATIONS
from kwire.protocol import messages

from .conftest import serve


def test_confluent_describe_topics_gets_the_topic_operations(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic("orders", 2, 1)])["orders"].result(timeout=30)
        described = admin.describe_topics(confluent_kafka.TopicCollection(["orders"]),
                                          include_authorized_operations=True)["orders"].result(timeout=30)
    # No authorizer: every operation Kafka lists for topics is allowed.
    names = {op.name for op in described.authorized_operations}
    assert names == {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def test_operations_only_when_asked_and_cluster_operations_up_to_v10(state):
    from kwire.broker.handlers.topic_admin import create_topic

    create_topic(state, "orders", 1, {})
    R = messages.MetadataRequest
    asked = serve(state, R(topics=[R.MetadataRequestTopic(name="orders")], include_topic_authorized_operations=True,
                           include_cluster_authorized_operations=True), 10)
    assert asked.topics[0].topic_authorized_operations not in (0, NO_AUTHORIZED_OPERATIONS)
    assert asked.cluster_authorized_operations not in (0, NO_AUTHORIZED_OPERATIONS)
    plain = serve(state, R(topics=[R.MetadataRequestTopic(name="orders")]), 12)
    assert plain.topics[0].topic_authorized_operations == NO_AUTHORIZED_OPERATIONS
