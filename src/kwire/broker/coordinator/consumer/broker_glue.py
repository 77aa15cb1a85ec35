"""Building the broker's consumer-group coordinator from its state: timeouts, timer, store.

Kept apart so ``BrokerState`` needs one line, and the coordinator stays free of the broker.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..timers import Timers
from .coordinator import ConsumerGroupCoordinator, Timeouts

if TYPE_CHECKING:
    from ...state import BrokerState

__all__ = ["open_consumer_groups", "DeadlineTimer"]

_SESSION = "consumer.session.timeout.ms"
_HEARTBEAT = "consumer.heartbeat.interval.ms"


class DeadlineTimer:
    """One asyncio timer at the coordinator's next deadline (re-armed as it moves)."""

    _KEY = ("consumer-group-deadlines",)

    def __init__(self, now_ms):
        self._timers = Timers()
        self._now = now_ms
        self.fire = lambda: None

    def __call__(self, deadline: int | None) -> None:
        if deadline is None:
            self._timers.cancel(self._KEY)
        elif self._timers.bind() is not None:
            self._timers.schedule(self._KEY, deadline - self._now() + 1, self.fire)

    def close(self) -> None:
        self._timers.cancel_all()


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def open_consumer_groups(state: BrokerState) -> ConsumerGroupCoordinator:
    config = state.config
    group_configs = getattr(state, "group_configs", None)

    def timeouts(group_id: str) -> Timeouts:
        # A group's own consumer.* configs win over the broker's group.consumer.* settings.
        session, heartbeat = config.group_consumer_session_timeout_ms, config.group_consumer_heartbeat_interval_ms
        if group_configs is not None:
            cfg = group_configs.get(group_id)
            if _SESSION in cfg.overrides:
                session = cfg.consumer_session_timeout_ms
            if _HEARTBEAT in cfg.overrides:
                heartbeat = cfg.consumer_heartbeat_interval_ms
        return Timeouts(session, heartbeat)

    def classic_active(group_id: str) -> bool:
        group = state.coordinator.group(group_id)
        return group is not None and bool(group.members)

    timer = DeadlineTimer(_monotonic_ms)
    from .records import ConsumerGroupRecords
    records = ConsumerGroupRecords(state.coordinator.store)
    coordinator = ConsumerGroupCoordinator(state.topics, timeouts=timeouts, now_ms=_monotonic_ms,
                                           classic_group_active=classic_active, records=records,
                                           on_deadline=timer, release_classic=state.coordinator.release_group,
                                           adopt_classic=state.coordinator.adopt_group,
                                           migration_policy=config.group_consumer_migration_policy,
                                           assignors=config.group_consumer_assignors,
                                           load_group=state.coordinator.ask_for)
    timer.fire = coordinator.expire
    classic = state.coordinator
    classic.topics_in_use = coordinator.topics_in_use
    classic.on_groups_loaded = coordinator.groups_loaded

    def has_offsets(group_id: str) -> bool:
        group = classic.group(group_id)
        return group is not None and bool(group.offsets or group.pending_txn_offsets)

    classic.on_expiry_check = lambda: coordinator.remove_empty_groups(has_offsets)
    coordinator.groups()  # what was loaded already (a broker that loads before it listens)
    return coordinator
