"""Feature versions (KIP-584): what ApiVersions reports and UpdateFeatures changes.

Kafka 4.3 formats a new cluster at metadata.version 4.3-IV0 (level 30) with transaction.version 2,
group.version 1, share.version 1, eligible.leader.replicas.version 1 and streams.version 1.  This
broker claims only the levels whose protocol it serves: KIP-890 part 2 transactions (EndTxn v5,
AddPartitionsToTxn v4-5, TxnOffsetCommit v5, Produce v12's implicit add), so transaction.version 2,
which an admin may lower to 1 or 0 as Kafka allows (kwire.broker.transactions.version says what a
level changes); KIP-848 consumer groups, so group.version 1 (librdkafka's group.protocol=consumer checks it); KIP-932 share groups, so
share.version 1; KIP-1071 streams groups (StreamsGroupHeartbeat/Describe), so streams.version 1,
Kafka 4.2's production level; no ELR, so its level is 0 (a level 0 feature is not finalized, as
in Kafka).  kraft.version is 0: a static one-voter quorum (AddRaftVoter and RemoveRaftVoter refuse
any change, cluster_membership.py).

The finalized levels are kept in ``<data dir>/__kwire/features.json`` with an epoch that grows
with every change (Kafka's is the metadata log offset of the last feature record).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from weakref import WeakKeyDictionary

from kwire.protocol import messages
from kwire.protocol.admin import FeatureUpgradeType
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidRequestError,
    InvalidUpdateVersionError,
    KafkaError,
)

from ..auth.acls import AclOperation, ResourceType
from ..auth.files import JsonFile
from ..topics import META_DIR
from .registry import handler

__all__ = ["DEFAULT_LEVELS", "SUPPORTED", "FeatureStore", "features_of"]

METADATA_VERSION = "metadata.version"
# metadata.version levels 7 (3.3-IV3, Kafka 4's minimum) .. 30 (4.3-IV0); those marked True
# changed the metadata format, and Kafka refuses a downgrade across them.
_MV_CHANGES = {7: True, 8: True, 9: False, 10: False, 11: True, 12: False, 13: True, 14: True, 15: True, 16: False,
               17: True, 18: False, 19: False, 20: True, 21: False, 22: False, 23: True, 24: False, 25: False,
               26: False, 27: False, 28: False, 29: False, 30: True}

# name -> (min, max) level this broker supports (ApiVersions' SupportedFeatures).
SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (min(_MV_CHANGES), max(_MV_CHANGES)),
    "kraft.version": (0, 0),
    "transaction.version": (0, 2),
    "group.version": (0, 1),
    "share.version": (0, 1),
    "eligible.leader.replicas.version": (0, 0),
    "streams.version": (0, 1),
}
DEFAULT_LEVELS = {METADATA_VERSION: 30, "transaction.version": 2, "group.version": 1, "share.version": 1,
                  "streams.version": 1}


@dataclass(frozen=True, slots=True)
class Finalized:
    epoch: int
    levels: dict[str, int]


def _parse(doc: object) -> Finalized:
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ValueError("unknown features file version")
    return Finalized(int(doc["epoch"]), {str(k): int(v) for k, v in doc["levels"].items()})


def _dump(f: Finalized) -> object:
    return {"version": 1, "epoch": f.epoch, "levels": dict(sorted(f.levels.items()))}


class FeatureStore:
    """The finalized feature levels (only those above 0), as kept on disk."""

    def __init__(self, data_dir: Path):
        self._file: JsonFile[Finalized] = JsonFile(Path(data_dir) / META_DIR / "features.json", _parse, _dump,
                                                   Finalized(1, dict(DEFAULT_LEVELS)))

    def current(self) -> Finalized:
        return self._file.current()

    def set_levels(self, levels: dict[str, int]) -> Finalized:
        def change(old: Finalized) -> Finalized:
            merged = {**old.levels, **levels}
            return Finalized(old.epoch + 1, {k: v for k, v in merged.items() if v > 0})

        return self._file.update(change)


_STORES: WeakKeyDictionary = WeakKeyDictionary()


def features_of(broker) -> FeatureStore:
    """The broker's feature store (opened on first use)."""
    store = _STORES.get(broker)
    if store is None:
        store = _STORES[broker] = FeatureStore(broker.data_dir)
    return store


def _check(name: str, level: int, upgrade_type: int, current: dict[str, int], node: int) -> None:
    """Kafka's FeatureControlManager.updateFeature checks, in its order and words."""
    prefix = f"Invalid update version {level} for feature {name}."
    if name not in SUPPORTED:
        raise InvalidUpdateVersionError(f"{prefix} Local controller {node} does not support this feature.")
    lo, hi = SUPPORTED[name]
    if not lo <= level <= hi:
        raise InvalidUpdateVersionError(f"{prefix} Local controller {node} only supports versions {lo}-{hi}")
    if upgrade_type not in tuple(FeatureUpgradeType):
        raise InvalidUpdateVersionError(f"{prefix} Unknown upgrade type {upgrade_type}.")
    now = current.get(name, 0)
    if level < now and upgrade_type == FeatureUpgradeType.UPGRADE:
        raise InvalidUpdateVersionError(f"{prefix} Can't downgrade the version of this feature without setting the "
                                        "upgrade type to either safe or unsafe downgrade.")
    if level > now and upgrade_type != FeatureUpgradeType.UPGRADE:
        raise InvalidUpdateVersionError(f"{prefix} Can't downgrade to a newer version.")
    if name == METADATA_VERSION and level < now and any(_MV_CHANGES[v] for v in range(level + 1, now + 1)):
        why = ("Unsafe metadata downgrade is not supported in this version."
               if upgrade_type == FeatureUpgradeType.UNSAFE_DOWNGRADE else
               "Refusing to perform the requested downgrade because it might delete metadata information.")
        raise InvalidUpdateVersionError(f"Unsupported metadata.version downgrade from {now} to {level}. {why}")


@handler(messages.UpdateFeaturesRequest.API_KEY, 0)
def handle_update_features(ctx, request):
    """All or nothing, as Kafka 4's controller: the first refused update fails the request, its
    error at the top level with no per-feature results (UpdateFeaturesResponse.createWithErrors);
    on success v0-1 list each feature with no error; validate_only changes nothing."""
    R = messages.UpdateFeaturesResponse
    v = ctx.api_version
    store = features_of(ctx.broker)
    code, message = 0, None
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER):
        code, message = ClusterAuthorizationFailedError.code, "Cluster authorization failed."
    else:
        current = store.current().levels
        levels: dict[str, int] = {}
        try:
            for u in request.feature_updates:
                if u.feature in levels:
                    raise InvalidRequestError(f"Feature {u.feature} appears more than once in the request.")
                if v == 0:
                    upgrade = FeatureUpgradeType.SAFE_DOWNGRADE if u.allow_downgrade else FeatureUpgradeType.UPGRADE
                else:
                    upgrade = u.upgrade_type
                level = max(int(u.max_version_level), 0)
                _check(u.feature, level, upgrade, current, ctx.broker.config.node_id)
                levels[u.feature] = level
            if levels and not (v >= 1 and request.validate_only):
                store.set_levels(levels)
        except KafkaError as exc:
            code, message = exc.code, exc.message  # Kafka sends the bare message
    resp = R(throttle_time_ms=0, error_code=code, error_message=message)
    if v < 2:
        resp.results = [] if code else [R.UpdatableFeatureResult(feature=u.feature, error_code=ErrorCode.NONE, error_message=None)
                                        for u in request.feature_updates]
    return resp
