"""Wire constants of the admin APIs: enum values carried as plain ints in their messages."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["METADATA_TOPIC", "DescribeClusterEndpointType", "ElectionType", "FeatureUpgradeType", "GroupMemberType",
           "ScramMechanism"]

# The KRaft metadata log's topic (DescribeQuorum names it; its only partition is 0).
METADATA_TOPIC = "__cluster_metadata"


class ScramMechanism(IntEnum):
    """The int8 ``Mechanism`` of Describe/AlterUserScramCredentials."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def sasl_name(self) -> str:
        return self.name.replace("_", "-")


class ElectionType(IntEnum):
    """ElectLeaders' ``ElectionType`` (v1+; v0 is always preferred)."""

    PREFERRED = 0
    UNCLEAN = 1


class FeatureUpgradeType(IntEnum):
    """UpdateFeatures' ``UpgradeType`` (v1+; v0's AllowDowngrade maps to SAFE_DOWNGRADE)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


class DescribeClusterEndpointType(IntEnum):
    BROKERS = 1
    CONTROLLERS = 2


class GroupMemberType(IntEnum):
    """ConsumerGroupDescribe's member ``MemberType`` (v1+, KIP-1099): which protocol a member of a
    consumer group joined with."""

    UNKNOWN = -1
    CLASSIC = 0
    CONSUMER = 1
