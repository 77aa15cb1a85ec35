"""The classic group coordinator: JoinGroup/SyncGroup rebalances, heartbeats, committed offsets.

Behaviour follows Kafka's classic protocol coordinator, because that is what clients are
written against:

* A rebalance starts when a member joins, leaves, dies or changes its metadata (or the leader
  rejoins).  It ends when every known member has rejoined, or when the rebalance timeout (the
  largest any member asked for) expires; dynamic members that did not rejoin are then removed.
  A brand-new group first waits ``group_initial_rebalance_delay_ms`` (longer while members keep
  arriving, up to the rebalance timeout) so a starting fleet lands in one generation.
* The new generation's leader gets every member's metadata of the selected protocol and
  answers with the assignment in SyncGroup; followers' SyncGroups wait for it.  Members that
  do not sync within the rebalance timeout are removed.
* Sessions: a member that sends nothing (heartbeat, join, sync, commit) for its session timeout
  is removed.  Members parked in JoinGroup cannot heartbeat, so they are kept alive, except
  brand-new ones, which get five minutes (a client that gave up must not linger forever).
* Static members (group.instance.id) keep their place across restarts: a join with the same
  instance id and no member id replaces the old member id without a rebalance when nothing
  changed; requests with the old member id are fenced (FENCED_INSTANCE_ID).

Handlers run on the broker's event loop, one at a time, so there is no locking; the timers run
on the same loop.  Everything a restarted broker needs (committed offsets, each group's
generation and protocol) is written to ``__consumer_offsets`` as Kafka's records
(``OffsetsTopicStore``) before the request that changed it is answered; a journal left by an
earlier kwire is migrated there at the first start.  With fsync "always" an OffsetCommit (the frequent write) is fsynced in
a worker thread, shared by the commits that arrive meanwhile, and answered after it
(``journal_synced``); the rarer group records are fsynced as they are written.  Members are not restored after a restart: groups come back Empty and
their members rejoin, as they would after Kafka expired them.

The committed offsets (OffsetCommit, transactional offsets, OffsetFetch, OffsetDelete, expiry) are
``offset_commits.OffsetCommits`` and the describe/list/delete calls ``group_admin.GroupAdmin``,
both mixed into ``GroupCoordinator``; this module keeps the groups, their rebalances and timers.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from ..durability import GroupCommit
from ..topics import META_DIR
from .group import CONSUMER_PROTOCOL_TYPE, Group, GroupState, Member
from .group_admin import GROUP_TYPE, GroupAdmin
from .migration import journal_to_migrate, migrate_journal
from .model import (
    JoinedMember,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from .offset_commits import OFFSET_METADATA_MAX_BYTES, OffsetCommits
from .offsets_topic import OffsetsTopicStore
from .store import GroupRecord, MemberRecord, StoredGroup
from .timers import ManualClock, Timers
from .validation import check_member

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..internal_topics import InternalTopics
    from ..topics import TopicRegistry

__all__ = ["GroupCoordinator", "GROUPS_DIR", "GROUP_TYPE", "NEW_MEMBER_JOIN_TIMEOUT_MS",
           "OFFSET_METADATA_MAX_BYTES", "OFFSETS_RETENTION_CHECK_INTERVAL_MS"]

logger = logging.getLogger("kwire.broker.coordinator")

GROUPS_DIR = "groups"
# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a member that never got a JoinGroup
# answer is kept (its client may have given up and retried as another member).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 10 * 60 * 1000  # offsets.retention.check.interval.ms

_Waiting = asyncio.Future  # a parked request's answer


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _resolve(fut: asyncio.Future | None, value: Any) -> None:
    # The request may be gone (its connection closed and the handler task was cancelled).
    if fut is not None and not fut.done():
        fut.set_result(value)


def _with_reason(why: str, req: JoinRequest) -> str:
    """Our reason for a rebalance, with the client's own (JoinGroup v8+) when it gave one."""
    return f"{why} (client: {req.reason})" if req.reason else why


class GroupCoordinator(OffsetCommits, GroupAdmin):
    """All classic groups of the broker.  ``close()`` it on shutdown.

    ``clock`` (milliseconds since the epoch) stamps commits and drives offset expiry.  The
    timeouts (sessions, joins, syncs) run on the event loop, or on ``clock`` itself when it is
    a ``ManualClock``: tests then advance time instead of sleeping.
    """

    def __init__(self, data_dir: Path, config: BrokerConfig, topics: TopicRegistry, *, clean_shutdown: bool,
                 internal_topics: InternalTopics, notify: Callable[[tuple[str, int]], None] | None = None,
                 clock: Callable[[], int] | None = None,
                 retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS, load: bool = True):
        self._config = config
        self._topics = topics
        self._clock = clock or _wall_clock_ms
        self._retention_check_interval_ms = retention_check_interval_ms
        # (After a crash the logs' own recovery checks what the topic holds: clean_shutdown
        # needs nothing more here.)
        self._store = OffsetsTopicStore(internal_topics, fsync=config.fsync, notify=notify)
        # __consumer_offsets partitions not loaded yet: with load=False the broker's loader
        # replays them after it listens (load_partition); their groups answer
        # COORDINATOR_LOAD_IN_PROGRESS meanwhile.  A journal to migrate is loaded at once.
        self._loading: set[int] = set()
        self.load_refusals = 0  # requests answered while their partition loaded, for tests and stats
        self._wanted: set[int] = set()  # loading partitions a request asked for
        self._deleted_while_loading: set[str] = set()  # topics whose offsets loading groups must forget
        journal = Path(data_dir) / META_DIR / GROUPS_DIR
        if load or journal_to_migrate(journal):
            self._store.load_all()
            migrate_journal(self._store, journal)
        else:
            self._loading = set(self._store.partitions_on_disk())
        # fsync "always": commits written with defer_fsync share fsyncs run off the event loop.
        # Its rounds run one after another, so a round that finds nothing left to sync knows
        # an earlier, finished round covered it.
        self._journal_commit = GroupCommit()
        self._groups: dict[str, Group] = {}
        # Groups in their initial delayed join -> ms the delay may still be extended by.
        self._initial_delay_left: dict[str, int] = {}
        # (group, member id) of members restored by a load whose session timers are not running yet.
        self._unarmed_sessions: list[tuple[Group, str]] = []
        self._timers = Timers(on_bind=self._on_loop, clock=clock if isinstance(clock, ManualClock) else None)
        self._closed = False
        # KIP-848 groups keep their offsets here too; their coordinator says which topics their
        # members subscribe to, whose offsets neither expire nor may be deleted (Kafka's
        # ConsumerGroup.isSubscribedToTopic).  None: no such groups.
        self.topics_in_use: Callable[[str], Collection[str]] | None = None
        # Told the group ids of each partition loaded after start, and each offset expiry check
        # (KIP-848 groups start their members' sessions, and drop empty groups without offsets).
        self.on_groups_loaded: Callable[[list[str]], None] | None = None
        # Told a loading partition a request first asked for (the loader loads it at once if
        # small: load_partition runs before it returns; else next).
        self.on_wanted: Callable[[int], None] | None = None
        self.on_expiry_check: Callable[[], None] | None = None
        self._load()

    # ------------------------------------------------------------------ lifecycle

    def _load(self) -> None:
        now = self._clock()
        for group_id, stored in self._store.groups.items():
            self._restore(group_id, stored, now)
        if self._groups:
            logger.info("loaded %d group(s) with %d committed offset(s)", len(self._groups),
                        sum(len(g.offsets) for g in self._groups.values()))
        self._arm_restored_sessions()

    def _restore(self, group_id: str, stored: StoredGroup, now: int) -> None:
        """A group as its partition's replay left it."""
        group = Group(group_id, state_timestamp_ms=now)
        record = stored.record
        if record is not None:
            group.generation_id = record.generation_id
            group.protocol_type = record.protocol_type
            if record.state == GroupState.EMPTY.value or not record.members:
                group.state_timestamp_ms = record.state_timestamp_ms
            elif not any(m.assignment for m in record.members):
                # No member holds anything: a generation stored mid-rebalance by an earlier kwire
                # (it stored each generation at its join, Kafka at its assignment).  Loaded Stable
                # it would never be assigned; its members rejoin instead.
                logger.info("group %s: generation %d was stored without assignments; its members rejoin",
                            group_id, record.generation_id)
            else:
                self._restore_generation(group, record)
        elif stored.offsets:
            # Offsets alone: a group that only stores offsets; their age counts from their commits.
            group.state_timestamp_ms = None
        group.offsets = dict(stored.offsets)
        group.pending_txn_offsets = {pid: dict(staged) for pid, staged in stored.pending.items()}
        self._groups[group_id] = group

    def _restore_generation(self, group: Group, record: GroupRecord) -> None:
        """The stored generation's members, back as they were (Kafka's ClassicGroup.fromRecord and
        GroupMetadataManager.onLoaded): the group is Stable, each member supports just the
        generation's protocol with the subscription stored for it, keeps its assignment, and gets
        a fresh session timeout, so a client that outlived the restart carries on without a
        rebalance and one that did not is expired by its session."""
        protocol = record.protocol_name or ""
        members = [Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                          m.session_timeout_ms, record.protocol_type or "", [(protocol, m.metadata)], m.assignment)
                   for m in record.members]
        group.restore_stable(members, record.protocol_name, record.leader_id, record.state_timestamp_ms)
        self._unarmed_sessions.extend((group, m.member_id) for m in members)
        logger.info("group %s: generation %d loaded with %d member(s)", group.group_id, record.generation_id,
                    len(members))

    def _arm_restored_sessions(self) -> None:
        """Start the session timers of the members a load restored, once timers can run (the
        coordinator may load before the broker's event loop runs: then at its first bind)."""
        if not self._unarmed_sessions or self._timers.bind() is None:
            return
        unarmed, self._unarmed_sessions = self._unarmed_sessions, []
        for group, member_id in unarmed:
            member = group.members.get(member_id)
            if member is not None and self._live(group):
                self._schedule_session(group, member)

    # ------------------------------------------------------------------ loading after start

    @property
    def loading_partitions(self) -> list[int]:
        """The __consumer_offsets partitions still to load (``load_partition``), in order."""
        return sorted(self._loading)

    def loading(self, group_id: str | None = None) -> bool:
        """Whether the group's partition (any partition, for None) is still being loaded: Kafka's
        coordinator runtime answers COORDINATOR_LOAD_IN_PROGRESS for it meanwhile.  Every handler
        asks this before it reads the group: see ``ask_for``, so a small partition's group is
        served by this very request."""
        if not self._loading:
            return False
        if group_id is not None and not self.ask_for(group_id):
            return False
        self.load_refusals += 1
        return True

    def ask_for(self, group_id: str) -> bool:
        """Whether the group's partition is still loading, after the loader was told it is asked
        for (``on_wanted``, the first time): a small partition is loaded at once (kwire's
        shortcut, see coordinator.loader), a larger one next.  For readers of the group's state
        outside this coordinator (the KIP-848 groups), which must not count as refusals."""
        if not self._loading:
            return False
        partition = self._store.partition_of(group_id)
        if partition not in self._loading:
            return False
        if partition not in self._wanted:
            self._wanted.add(partition)  # the loader loads it now if small, else next
            if self.on_wanted is not None:
                self.on_wanted(partition)
        return partition in self._loading

    def wanted_partitions(self) -> frozenset[int]:
        """The loading partitions clients have asked for (the loader reads it from its thread:
        a copy)."""
        return frozenset(self._wanted)

    def load_partition(self, partition: int, groups: dict[str, StoredGroup], findings: list[str]) -> None:
        """Install a partition the loader replayed (``OffsetsTopicStore.read_partition``), on the
        event loop; its groups are served from now on."""
        if self._closed or partition not in self._loading:
            return
        self._store.install(partition, groups, findings)
        now = self._clock()
        for group_id, stored in groups.items():
            self._restore(group_id, stored, now)
        self._arm_restored_sessions()
        self._loading.discard(partition)
        self._wanted.discard(partition)
        for topic in sorted(self._deleted_while_loading):
            self._forget_topic(topic, [self._groups[g] for g in groups if g in self._groups])
        if not self._loading:
            self._deleted_while_loading.clear()
        if groups:
            logger.debug("__consumer_offsets-%d loaded: %d group(s)", partition, len(groups))
        if self.on_groups_loaded is not None:
            self.on_groups_loaded(list(groups))

    def _on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._arm_restored_sessions()
        self._schedule(("retention",), self._retention_check_interval_ms, self._retention_tick)

    def _retention_tick(self) -> None:
        try:
            self.expire_offsets()
        finally:
            self._schedule(("retention",), self._retention_check_interval_ms, self._retention_tick)

    def journal_synced(self):
        """What to wait for before answering a ``commit_offsets(..., defer_fsync=True)``: with
        fsync "always", a future done once every journal write made so far is fsynced (or
        failed with the OSError); None when the journal does not fsync every write.  Without a
        running event loop the fsync happens at once."""
        if not self._store.fsyncs_every_write:
            return None
        return self._journal_commit.request([self])

    def flush(self) -> None:
        """fsync the journal (the broker calls this periodically with ``fsync = "interval"``)."""
        if not self._closed:
            self._store.flush()

    def close(self) -> None:
        """Stop the timers, answer parked requests and close the journal (fsynced).

        Parked JoinGroup/SyncGroup requests get NOT_COORDINATOR, as Kafka answers when a
        coordinator gives its groups up: clients look for the coordinator again and rejoin.
        The stored generations stay as they are: a restart loads them back with their members.
        """
        if self._closed:
            return
        self._closed = True
        self._timers.cancel_all()
        self._timers.run_in_loop(self._answer_parked, NotCoordinatorError.code)
        self._store.close()

    def _answer_parked(self, error: int) -> None:
        for group in self._groups.values():
            for member in group.members.values():
                self._fail_waiters(member, error)

    # ------------------------------------------------------------------ helpers

    def _schedule(self, key: tuple, delay_ms: float, fn: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            if not self._closed:
                fn(*args)

        self._timers.schedule(key, delay_ms, guarded)

    def _live(self, group: Group) -> bool:
        """The group object is still the coordinator's (a timer may outlive a deleted group)."""
        return not self._closed and self._groups.get(group.group_id) is group

    def _register(self, group: Group) -> None:
        self._groups.setdefault(group.group_id, group)

    def _new_future(self) -> asyncio.Future:
        loop = self._timers.bind()
        if loop is None:
            raise RuntimeError("JoinGroup and SyncGroup need a running event loop")
        return loop.create_future()

    @staticmethod
    def _session_key(group: Group, member_id: str) -> tuple:
        return ("session", group.group_id, member_id)

    def _schedule_session(self, group: Group, member: Member) -> None:
        """(Re)start the member's session timer; a member parked in JoinGroup can't heartbeat."""
        key = self._session_key(group, member.member_id)
        if member.awaiting_join and not member.is_new:
            self._timers.cancel(key)
            return
        timeout = NEW_MEMBER_JOIN_TIMEOUT_MS if member.awaiting_join else member.session_timeout_ms
        self._schedule(key, timeout, self._expire_member, group, member.member_id)

    def _fail_waiters(self, member: Member, error: int) -> None:
        _resolve(member.join_waiter, JoinResult(error, member.member_id))
        _resolve(member.sync_waiter, SyncResult(error))
        member.join_waiter = member.sync_waiter = None

    def _drop_member(self, group: Group, member: Member, error: int) -> None:
        """Remove a member, answering its parked requests with ``error``; no rebalance decisions."""
        self._fail_waiters(member, error)
        group.remove(member.member_id)
        self._timers.cancel(self._session_key(group, member.member_id))

    def _group_record(self, group: Group) -> GroupRecord:
        members = tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(group.protocol_name),
                                     m.assignment) for m in group.members.values())
        return GroupRecord(group.group_id, group.protocol_type, group.generation_id, group.protocol_name,
                           group.leader_id, group.state.value, group.state_timestamp_ms or self._clock(), members)

    def _persist_group(self, group: Group) -> bool:
        try:
            self._store.put_group(self._group_record(group))
            return True
        except OSError:
            logger.exception("group %s: could not write generation %d to the journal", group.group_id,
                             group.generation_id)
            return False

    def _remove_group(self, group: Group) -> None:
        """Forget a group (Empty, no offsets left or deleted): it becomes Dead."""
        self._store.delete_group(group.group_id)
        group.transition_to(GroupState.DEAD, self._clock())
        del self._groups[group.group_id]
        self._initial_delay_left.pop(group.group_id, None)
        gid = group.group_id
        self._timers.cancel_matching(lambda key: len(key) > 1 and key[1] == gid)

    def _maybe_remove_empty(self, group: Group) -> None:
        """Kafka's cleanup rule: an Empty group without offsets is gone (its generation with it)."""
        if (group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_members
                and not group.pending_txn_offsets and self._live(group)):
            logger.info("group %s is empty and has no offsets left: removing it", group.group_id)
            try:
                self._remove_group(group)
            except OSError:
                logger.exception("group %s: could not record its removal; will retry", group.group_id)

    # ------------------------------------------------------------------ rebalancing

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        gid = group.group_id
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Followers waiting for an assignment of the generation that is being abandoned.
            self._reset_assignments(group, RebalanceInProgressError.code)
        self._timers.cancel(("sync", gid))
        group.pending_sync.clear()
        was_empty = group.is_(GroupState.EMPTY)
        logger.info("group %s: preparing to rebalance (state %s, generation %d): %s", gid, group.state.value,
                    group.generation_id, reason)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._clock())
        if was_empty:
            delay = self._config.group_initial_rebalance_delay_ms
            self._initial_delay_left[gid] = max(group.rebalance_timeout_ms - delay, 0)
            self._schedule(("join", gid), delay, self._initial_join_expired, group)
        else:
            self._initial_delay_left.pop(gid, None)
            self._schedule(("join", gid), group.rebalance_timeout_ms, self._complete_join, group)
            self._try_complete_join(group)

    def _initial_join_expired(self, group: Group) -> None:
        if not self._live(group):
            return
        left = self._initial_delay_left.get(group.group_id, 0)
        if group.new_member_added and left > 0:
            group.new_member_added = False
            delay = min(self._config.group_initial_rebalance_delay_ms, left)
            self._initial_delay_left[group.group_id] = left - delay
            self._schedule(("join", group.group_id), delay, self._initial_join_expired, group)
        else:
            self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if (group.is_(GroupState.PREPARING_REBALANCE) and group.group_id not in self._initial_delay_left
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop who did not rejoin, start the next generation, answer the joins."""
        if not self._live(group) or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        gid = group.group_id
        self._timers.cancel(("join", gid))
        self._initial_delay_left.pop(gid, None)
        for member in group.not_yet_rejoined():
            # Static members stay: their instance may come back with its old id within the session.
            if not member.is_static:
                logger.info("group %s: removing member %s, which did not rejoin in time", gid, member.member_id)
                self._drop_member(group, member, UnknownMemberIdError.code)
        if not group.maybe_elect_new_joined_leader() and group.members:
            logger.warning("group %s: no member rejoined; waiting for the remaining static members", gid)
            self._schedule(("join", gid), group.rebalance_timeout_ms, self._complete_join, group)
            return
        group.init_next_generation(self._clock())
        if group.is_(GroupState.EMPTY):
            # Kafka stores a generation when its assignment is in (SyncGroup), or at once when
            # it is empty: a restart mid-rebalance finds the last complete generation.
            self._persist_group(group)
            logger.info("group %s: generation %d is empty", gid, group.generation_id)
            return
        logger.info("group %s: generation %d with %d member(s), protocol %s, leader %s", gid, group.generation_id,
                    len(group.members), group.protocol_name, group.leader_id)
        everyone = [JoinedMember(mid, iid, metadata) for mid, iid, metadata in group.current_member_metadata()]
        for member in group.members.values():
            result = JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type,
                                group.protocol_name, group.leader_id or "",
                                list(everyone) if group.is_leader(member.member_id) else [])
            _resolve(member.join_waiter, result)
            member.join_waiter = None
            member.is_new = False
            self._schedule_session(group, member)
        self._schedule(("sync", gid), group.rebalance_timeout_ms, self._expire_pending_sync, group,
                       group.generation_id)

    def _expire_pending_sync(self, group: Group, generation_id: int) -> None:
        if not self._live(group) or group.generation_id != generation_id or not group.pending_sync:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        late = sorted(group.pending_sync)
        logger.info("group %s: removing member(s) %s, which did not send SyncGroup in time", group.group_id,
                    ", ".join(late))
        for member_id in late:
            member = group.members.get(member_id)
            if member is not None:
                self._drop_member(group, member, UnknownMemberIdError.code)
        self._maybe_prepare_rebalance(group, f"member(s) {', '.join(late)} did not sync")

    def _reset_assignments(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            _resolve(member.sync_waiter, SyncResult(error))
            member.sync_waiter = None

    def _propagate_assignments(self, group: Group) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                _resolve(member.sync_waiter, SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                                                        member.assignment))
                member.sync_waiter = None
                self._schedule_session(group, member)

    def _expire_member(self, group: Group, member_id: str) -> None:
        if not self._live(group):
            return
        member = group.members.get(member_id)
        if member is None:
            return
        logger.info("group %s: member %s timed out", group.group_id, member_id)
        self._remove_member_and_rebalance(group, member, f"member {member_id} timed out")

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if not self._live(group) or member_id not in group.pending_members:
            return
        logger.info("group %s: pending member %s did not join in time", group.group_id, member_id)
        group.pending_members.discard(member_id)
        self._try_complete_join(group)

    def _remove_member_and_rebalance(self, group: Group, member: Member, reason: str) -> None:
        self._drop_member(group, member, UnknownMemberIdError.code)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ------------------------------------------------------------------ JoinGroup

    async def join_group(self, group_id: str, request: JoinRequest) -> JoinResult:
        """Join (or rejoin) a group; returns when the join phase ends or at once with an error."""
        outcome = self._join(group_id, request)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _join(self, group_id: str, req: JoinRequest) -> JoinResult | _Waiting:
        self._timers.bind()
        if not group_id:
            return JoinResult(InvalidGroupIdError.code, req.member_id)
        if self.loading(group_id):
            return JoinResult(CoordinatorLoadInProgressError.code, req.member_id)
        config = self._config
        if not config.group_min_session_timeout_ms <= req.session_timeout_ms <= config.group_max_session_timeout_ms:
            return JoinResult(InvalidSessionTimeoutError.code, req.member_id)
        group = self._groups.get(group_id)
        if group is None:
            if req.member_id:
                return JoinResult(UnknownMemberIdError.code, req.member_id)
            group = Group(group_id, state_timestamp_ms=self._clock())  # registered once someone is in it
        if group.is_(GroupState.DEAD):
            return JoinResult(CoordinatorNotAvailableError.code, req.member_id)
        if not group.supports_protocols(req.protocol_type, (name for name, _ in req.protocols)):
            return JoinResult(InconsistentGroupProtocolError.code, req.member_id)
        if req.member_id:
            outcome = self._join_known_member(group, req)
        else:
            outcome = self._join_new_member(group, req)
        self._try_complete_join(group)
        return outcome

    def _join_new_member(self, group: Group, req: JoinRequest) -> JoinResult | _Waiting:
        member_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_id = group.static_member_id(req.group_instance_id)
            if old_id is not None:
                return self._replace_static_member(group, old_id, member_id, req)
            return self._add_member_and_rebalance(group, member_id, req)
        if req.require_known_member_id:
            # The client must come back with this id; until then the rebalance waits for it
            # (for up to its session timeout), so a starting member is not left out.
            self._register(group)
            group.pending_members.add(member_id)
            self._schedule(("pending", group.group_id, member_id), req.session_timeout_ms, self._expire_pending,
                           group, member_id)
            return JoinResult(MemberIdRequiredError.code, member_id)
        return self._add_member_and_rebalance(group, member_id, req)

    def _join_known_member(self, group: Group, req: JoinRequest) -> JoinResult | _Waiting:
        member_id = req.member_id
        if group.is_pending(member_id):
            if req.group_instance_id is not None:
                # Ids from MEMBER_ID_REQUIRED go to dynamic members only; make the client start over.
                return JoinResult(UnknownMemberIdError.code, member_id)
            self._timers.cancel(("pending", group.group_id, member_id))
            return self._add_member_and_rebalance(group, member_id, req)
        if group.is_static_member_fenced(req.group_instance_id, member_id):
            return JoinResult(FencedInstanceIdError.code, member_id)
        if not group.has(member_id) or (req.group_instance_id is not None
                                        and group.static_member_id(req.group_instance_id) is None):
            return JoinResult(UnknownMemberIdError.code, member_id)
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, req, "member rejoined")
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(list(req.protocols)):
                # It probably missed the JoinGroup answer: give it again.
                self._schedule_session(group, member)
                return self._current_generation(group, member, with_members=group.is_leader(member_id))
            return self._update_member_and_rebalance(group, member, req, f"member {member_id} changed its metadata")
        if state is GroupState.STABLE:
            if group.is_leader(member_id):
                # The leader rejoins to have the assignment redone (e.g. the topics it reads changed).
                return self._update_member_and_rebalance(group, member, req, f"leader {member_id} rejoined")
            if not member.matches(list(req.protocols)):
                return self._update_member_and_rebalance(group, member, req,
                                                         f"member {member_id} changed its metadata")
            self._schedule_session(group, member)
            return self._current_generation(group, member, with_members=False)
        return JoinResult(UnknownMemberIdError.code, member_id)

    @staticmethod
    def _current_generation(group: Group, member: Member, *, with_members: bool,
                            leader_id: str | None = None) -> JoinResult:
        members = ([JoinedMember(mid, iid, md) for mid, iid, md in group.current_member_metadata()]
                   if with_members else [])
        leader = group.leader_id if leader_id is None else leader_id
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          leader or "", members)

    def _add_member_and_rebalance(self, group: Group, member_id: str, req: JoinRequest) -> _Waiting:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True)
        member.join_waiter = self._new_future()
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        self._register(group)
        group.add(member)
        self._schedule_session(group, member)
        self._maybe_prepare_rebalance(group, _with_reason(f"member {member_id} joined", req))
        return member.join_waiter

    def _update_member(self, group: Group, member: Member, req: JoinRequest) -> _Waiting:
        group.update_protocols(member, list(req.protocols))
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        # A second JoinGroup while one is parked: the client gave up on the first; answer it so
        # it doesn't hang, and park the new one.
        _resolve(member.join_waiter, JoinResult(RebalanceInProgressError.code, member.member_id))
        member.join_waiter = self._new_future()
        self._schedule_session(group, member)
        return member.join_waiter

    def _update_member_and_rebalance(self, group: Group, member: Member, req: JoinRequest, reason: str) -> _Waiting:
        waiter = self._update_member(group, member, req)
        self._maybe_prepare_rebalance(group, _with_reason(reason, req))
        return waiter

    def _replace_static_member(self, group: Group, old_id: str, new_id: str, req: JoinRequest) -> JoinResult | _Waiting:
        """A static member's new instance joined without a member id: it takes over the old one's place."""
        iid = req.group_instance_id
        assert iid is not None
        member = group.members[old_id]
        old_leader = group.leader_id
        logger.info("group %s: static member %s now has member id %s (was %s)", group.group_id, iid, new_id, old_id)
        # The old instance's parked requests can't be answered for it any more: it is fenced.
        self._fail_waiters(member, FencedInstanceIdError.code)
        self._timers.cancel(self._session_key(group, old_id))
        group.replace_static_member(iid, old_id, new_id)
        if group.is_(GroupState.STABLE) and member.matches(list(req.protocols)):
            # Same metadata, so the assignment stands: no rebalance.  The answer names the old
            # leader id so that even a restarted leader acts as a follower and fetches its
            # existing assignment with SyncGroup (a new one would not reach the others).
            member.rebalance_timeout_ms, member.session_timeout_ms = req.rebalance_timeout_ms, req.session_timeout_ms
            member.client_id, member.client_host = req.client_id, req.client_host
            self._persist_group(group)
            self._schedule_session(group, member)
            return self._current_generation(group, member, with_members=False, leader_id=old_leader)
        waiter = self._update_member(group, member, req)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            # Stable: its metadata changed, so must the assignment.  CompletingRebalance: the
            # leader may be assigning to the old member id.  Either way, redo the generation.
            self._prepare_rebalance(group, f"static member {iid} rejoined with new metadata or mid-sync")
        return waiter

    # ------------------------------------------------------------------ SyncGroup

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: Mapping[str, bytes]) -> SyncResult:
        """The leader hands in the assignment; every member (leader too) gets its own part back."""
        outcome = self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                             assignments)
        if isinstance(outcome, SyncResult):
            return outcome
        return await outcome

    def _sync(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
              protocol_type: str | None, protocol_name: str | None,
              assignments: Mapping[str, bytes]) -> SyncResult | _Waiting:
        self._timers.bind()
        if not group_id:
            return SyncResult(InvalidGroupIdError.code)
        if self.loading(group_id):
            return SyncResult(CoordinatorLoadInProgressError.code)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(UnknownMemberIdError.code)
        error = check_member(group, generation_id, member_id, group_instance_id)
        if error:
            return SyncResult(error)
        # v5+: a client that disagrees about the protocol must not apply this assignment.
        if protocol_type is not None and protocol_type != group.protocol_type:
            return SyncResult(InconsistentGroupProtocolError.code)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return SyncResult(InconsistentGroupProtocolError.code)
        member = group.members[member_id]
        if group.is_(GroupState.EMPTY):
            return SyncResult(UnknownMemberIdError.code)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(RebalanceInProgressError.code)
        group.pending_sync.discard(member_id)
        self._schedule_session(group, member)
        if group.is_(GroupState.STABLE):
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignment (or hand it in).
        _resolve(member.sync_waiter, SyncResult(RebalanceInProgressError.code))
        waiter = member.sync_waiter = self._new_future()
        if group.is_leader(member_id):
            self._apply_assignment(group, assignments)
        return waiter

    def _apply_assignment(self, group: Group, assignments: Mapping[str, bytes]) -> None:
        unknown = [mid for mid in assignments if mid not in group.members]
        if unknown:
            logger.warning("group %s: the leader assigned to unknown member(s) %s; ignored", group.group_id,
                           ", ".join(unknown))
        missing = [mid for mid in group.members if mid not in assignments]
        if missing:
            logger.warning("group %s: the leader gave no assignment to %s; they get an empty one", group.group_id,
                           ", ".join(missing))
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id) or b""
        if not self._persist_group(group):
            self._reset_assignments(group, CoordinatorNotAvailableError.code)
            self._maybe_prepare_rebalance(group, "the assignment could not be stored")
            return
        group.transition_to(GroupState.STABLE, self._clock())
        logger.info("group %s: generation %d is stable", group.group_id, group.generation_id)
        self._propagate_assignments(group)

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        """The member is alive; the answer tells it whether to rejoin (REBALANCE_IN_PROGRESS)."""
        self._timers.bind()
        if not group_id:
            return InvalidGroupIdError.code
        if self.loading(group_id):
            return ErrorCode.NONE  # Kafka's GroupCoordinatorService: "the group is still loading, so blindly respond"
        group = self._groups.get(group_id)
        if group is None:
            return UnknownMemberIdError.code
        error = check_member(group, generation_id, member_id, group_instance_id)
        if error:
            return error
        if group.is_(GroupState.EMPTY):
            return UnknownMemberIdError.code
        self._schedule_session(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return RebalanceInProgressError.code
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: Sequence[tuple[str, str | None]],
                    reason: str | None = None) -> tuple[int, list[int]]:
        """Remove (member id, group instance id) pairs; (group error, an error per member).

        An empty member id with an instance id removes that static member (the admin client's
        removeMembersFromConsumerGroup).
        """
        self._timers.bind()
        if not group_id:
            return InvalidGroupIdError.code, []
        if self.loading(group_id):
            return CoordinatorLoadInProgressError.code, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [UnknownMemberIdError.code] * len(members)
        if group.is_(GroupState.DEAD):
            return CoordinatorNotAvailableError.code, []
        why = f"member left ({reason})" if reason else "member left"
        results = []
        for member_id, instance_id in members:
            if not member_id:
                current = group.static_member_id(instance_id)
                if current is None:
                    results.append(UnknownMemberIdError.code)
                    continue
                member_id = current
            elif group.is_pending(member_id):
                group.pending_members.discard(member_id)
                self._timers.cancel(("pending", group_id, member_id))
                self._try_complete_join(group)
                results.append(ErrorCode.NONE)
                continue
            elif group.is_static_member_fenced(instance_id, member_id):
                results.append(FencedInstanceIdError.code)
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append(UnknownMemberIdError.code)
                continue
            logger.info("group %s: member %s leaves%s", group_id, member_id, f" ({reason})" if reason else "")
            self._remove_member_and_rebalance(group, member, why)
            results.append(ErrorCode.NONE)
        return ErrorCode.NONE, results

    # ------------------------------------------------------------------ KIP-848 conversion

    def release_group(self, group_id: str) -> tuple[int, str | None, list[Member]] | None:
        """The online upgrade (a consumer-protocol member joins a classic group): the members of a
        classic group of the consumer protocol, taken out of it with its generation and protocol;
        the group stays, Empty, with its offsets.  As Kafka's convertToConsumerGroup, any state
        converts: a rebalance under way is abandoned, its parked JoinGroup and SyncGroup answered
        REBALANCE_IN_PROGRESS (the members then join the consumer group's way).  None if the group
        can't be upgraded now (missing, loading, empty, another protocol type)."""
        if self.loading(group_id):  # first: it may load the group's partition now
            return None
        group = self._groups.get(group_id)
        if group is None or not group.members or group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        # A group that never completed a rebalance has no protocol yet: the one it would choose.
        generation, protocol = group.generation_id, group.protocol_name or group.select_protocol()
        members = list(group.members.values())
        rebalancing = not group.is_(GroupState.STABLE)
        for member in members:
            self._drop_member(group, member, RebalanceInProgressError.code if rebalancing else ErrorCode.NONE)
        self._timers.cancel_matching(lambda key: len(key) > 1 and key[1] == group_id)
        self._initial_delay_left.pop(group_id, None)
        now = self._clock()
        if not group.is_(GroupState.PREPARING_REBALANCE):
            group.transition_to(GroupState.PREPARING_REBALANCE, now)
        group.transition_to(GroupState.EMPTY, now)
        self._persist_group(group)
        return generation, protocol, members

    def adopt_group(self, group_id: str, generation: int, protocol_name: str, members: list[Member]) -> None:
        """The online downgrade (the last consumer-protocol member of a consumer group left):
        ``members`` become the classic group's at ``generation``, which then rebalances (the
        members learn it from their heartbeats and join again), as Kafka converts a group back."""
        self._timers.bind()
        group = self._groups.get(group_id)
        if group is None:
            group = Group(group_id, state_timestamp_ms=self._clock())
            self._register(group)
        if group.members:
            raise RuntimeError(f"group {group_id} has classic members already")
        group.generation_id = generation
        group.protocol_name = protocol_name
        for member in members:
            group.add(member)
        now = self._clock()
        for state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            group.transition_to(state, now)
        for member in members:
            self._schedule_session(group, member)
        self._persist_group(group)
        self._prepare_rebalance(group, "converted from a consumer group")

    # ------------------------------------------------------------------ introspection (tests, tools)

    def group(self, group_id: str) -> Group | None:
        """The live group object (read it, don't change it)."""
        return self._groups.get(group_id)

    @property
    def store(self) -> OffsetsTopicStore:
        return self._store

