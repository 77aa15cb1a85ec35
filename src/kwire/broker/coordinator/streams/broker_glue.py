"""Building the broker's streams-group coordinator from its state: settings, timer, topics, store.

Kept apart so ``BrokerState`` needs one line, and the coordinator stays free of the broker.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..consumer.broker_glue import DeadlineTimer
from .coordinator import StreamsGroupCoordinator, StreamsSettings

if TYPE_CHECKING:
    from ...state import BrokerState

__all__ = ["open_streams_groups"]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _StreamsDeadlineTimer(DeadlineTimer):
    _KEY = ("streams-group-deadlines",)


def open_streams_groups(state: BrokerState) -> StreamsGroupCoordinator:
    group_configs = state.group_configs

    def settings(group_id: str) -> StreamsSettings:
        # The group's streams.* configs over the broker's group.streams.* (Kafka 4.3's defaults).
        cfg = group_configs.get(group_id)
        return StreamsSettings(cfg.streams_session_timeout_ms, cfg.streams_heartbeat_interval_ms,
                               cfg.streams_num_standby_replicas, cfg.streams_initial_rebalance_delay_ms)

    def partitions_of(topic: str) -> int | None:
        info = state.topics.get(topic)
        return info.partitions if info is not None else None

    def other_group_type(group_id: str) -> str | None:
        # A group id is one group type at a time; a classic group that only keeps offsets is no
        # group of its own (a streams group's offsets live there too).
        if state.consumer_groups.has_group(group_id):
            return "consumer"
        classic = state.coordinator.group(group_id)
        if classic is not None and classic.members:
            return "classic"
        from ..group_types import is_share_group
        return "share" if is_share_group(state, group_id) else None

    timer = _StreamsDeadlineTimer(_monotonic_ms)
    from .records import StreamsGroupRecords
    coordinator = StreamsGroupCoordinator(partitions_of, settings=settings, now_ms=_monotonic_ms,
                                          other_group_type=other_group_type, on_deadline=timer,
                                          records=StreamsGroupRecords(state.coordinator.store),
                                          load_group=state.coordinator.ask_for)
    timer.fire = coordinator.expire
    classic = state.coordinator
    # The classic coordinator calls one hook each: chain the streams groups' after the consumer groups'.
    loaded_before, expiry_before = classic.on_groups_loaded, classic.on_expiry_check

    def groups_loaded(group_ids: list[str]) -> None:
        if loaded_before is not None:
            loaded_before(group_ids)
        coordinator.groups_loaded(group_ids)

    def has_offsets(group_id: str) -> bool:
        group = classic.group(group_id)
        return group is not None and bool(group.offsets or group.pending_txn_offsets)

    def expiry_check() -> None:
        if expiry_before is not None:
            expiry_before()
        coordinator.remove_empty_groups(has_offsets)

    in_use_before = classic.topics_in_use

    def topics_in_use(group_id: str) -> set[str]:
        before = set(in_use_before(group_id)) if in_use_before is not None else set()
        return before | coordinator.topics_in_use(group_id)

    classic.on_groups_loaded = groups_loaded
    classic.topics_in_use = topics_in_use
    classic.on_expiry_check = expiry_check
    coordinator.groups()  # what was loaded already (a broker that loads before it listens)
    return coordinator
