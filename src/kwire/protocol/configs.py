"""Wire constants of the config APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreateTopics v5+): resource types, where a value comes from, value types and the incremental
operations, with Kafka's numbering (``org.apache.kafka.common.config.ConfigResource.Type``,
``DescribeConfigsResponse.ConfigSource`` / ``ConfigType``, ``AlterConfigOp.OpType``)."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["AlterConfigOp", "ConfigResourceType", "ConfigSource", "ConfigType"]


class ConfigResourceType(IntEnum):
    """Whose configs a request names (the int8 ``ResourceType`` field)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Where a described value comes from (DescribeConfigs v1+ ``ConfigSource``; 0 from v0 brokers)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """A config's value type (DescribeConfigs v3+ ``ConfigType``; Kafka's ConfigDef.Type)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' ``ConfigOperation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
