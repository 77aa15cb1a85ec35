"""The broker's share groups: membership, share sessions and share partitions together, as the
request handlers use them (Kafka splits this between the group coordinator, SharePartitionManager
and the share coordinator; one broker holds all three).

Share partitions are created when a member is first assigned them (Kafka 4.1+ initializes share
state from the heartbeat's assignment), at the persisted state if ``__share_group_state`` has
one, else where the group's ``share.auto.offset.reset`` says: the log end (latest, the default),
the log start (earliest), or the first record not older than a duration (by_duration).

A share partition's changes (acknowledgements, releases, lock expiries: not acquisitions, as
Kafka's SharePartition) are written to ``__share_group_state`` before the answer goes out, as a
ShareUpdate of what changed or, every ``snapshot_every`` writes, a ShareSnapshot (persister), so
a restarted broker resumes with what was acknowledged and the delivery counts.  The groups'
members, epochs and assignments go to ``__consumer_offsets`` as ShareGroup* records (records) and
come back after a restart.  Time is ``now_ms()`` (injectable): locks and member sessions expire
when a request or a waiting fetch looks, never by a background timer.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kwire.protocol.errors import GroupIdNotFoundError, KafkaError, UnknownTopicOrPartitionError

from ..storage.batch_header import iter_headers
from .groups import ShareGroup, ShareGroups, ShareMember
from .partition import AcquiredRange, RecordState, SharePartition
from .persister import PersistedState, SharePersister
from .records import ShareGroupRecords
from .sessions import ShareSessionCache

__all__ = ["ShareManager", "FetchedPartition"]

logger = logging.getLogger("kwire.broker.share")

Key = tuple[str, str, int]  # (group, topic, partition)
# What a ShareFetch reads of a partition's log: MaxRecords records' worth at this many bytes each,
# at least READ_BYTES_MIN (and never more than the request's MaxBytes).
READ_BYTES_PER_RECORD = 2048
READ_BYTES_MIN = 1 << 20


@dataclass(slots=True)
class FetchedPartition:
    records: bytes
    acquired: list[AcquiredRange]


class ShareManager:
    def __init__(self, state, *, now_ms: Callable[[], int] | None = None, snapshot_every: int | None = None) -> None:
        self._state = state
        self.now_ms = now_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self.groups = ShareGroups(self._partitions_of, self._member_expired, self._load_group)
        self.sessions = ShareSessionCache()
        self.partitions: dict[Key, SharePartition] = {}
        self._topic_ids: dict[Key, uuid.UUID] = {}  # the topic id each share partition belongs to
        if snapshot_every is None:
            snapshot_every = state.config.share_coordinator_snapshot_update_records_per_snapshot
        self.persister = SharePersister(state.internal_topics, snapshot_every=snapshot_every)
        store = getattr(getattr(state, "coordinator", None), "store", None)
        self.records = None if store is None else ShareGroupRecords(
            store, self.topic_id, lambda tid: (info.name if (info := state.topics.by_id(tid)) is not None else None))
        self._loaded = self._load()
        listeners = getattr(state, "connection_listeners", None)
        if listeners is not None:
            listeners.append(self.connection_closed)

    # -- set-up ---------------------------------------------------------------------------------
    def _load(self) -> dict[Key, PersistedState]:
        out: dict[Key, PersistedState] = {}
        try:
            found = self.persister.load_all()
        except Exception:  # noqa: BLE001 - a broken state topic must not stop the broker
            logger.exception("reading __share_group_state failed; share groups start without their state")
            return out
        for (group, topic_id, p), st in found.items():
            info = self._state.topics.by_id(topic_id)
            if info is not None:
                out[(group, info.name, p)] = st
        return out

    def _load_group(self, group_id: str) -> ShareGroup | None:
        """A group as ``__consumer_offsets`` had it (ShareGroup* records), its members' sessions
        starting now: they heartbeat on with their epochs, as to a Kafka coordinator that took over.
        The group's partition is asked for first (``GroupCoordinator.ask_for``): after a restart a
        small one still loading is loaded now, so a handler that looks the group up before it asks
        whether it loads (ShareGroupDescribe) finds it instead of answering GROUP_ID_NOT_FOUND."""
        if self.records is None:
            return None
        ask_for = getattr(getattr(self._state, "coordinator", None), "ask_for", None)
        if ask_for is not None:
            ask_for(group_id)
        found = self.records.load(group_id)
        if found is None:
            return None
        group, _initialized = found
        deadline = self.now_ms() + self.config(group_id).share_session_timeout_ms
        for m in group.members.values():
            m.deadline_ms = deadline
        logger.info("share group %s: loaded at epoch %d with %d member(s)", group_id, group.group_epoch,
                    len(group.members))
        return group

    def _take_stored(self) -> None:
        """Take every group the offsets store replayed (their members' sessions start running)."""
        if self.records is not None:
            for group_id in self.records.stored_ids():
                self.groups.group(group_id)

    def _initialized(self, group_id: str) -> dict[str, tuple[uuid.UUID, list[int]]]:
        """topic -> (id, partitions) of the group's share partitions with state (Kafka's
        ShareGroupStatePartitionMetadata)."""
        out: dict[str, tuple[uuid.UUID, list[int]]] = {}
        for _g, topic, p in sorted(k for k in set(self.partitions) | set(self._loaded) if k[0] == group_id):
            tid = self.topic_id(topic)
            if tid is not None:  # (a topic deleted meanwhile has no state to speak of)
                out.setdefault(topic, (tid, []))[1].append(p)
        return out

    def persist_groups(self) -> None:
        """Write the ShareGroup* records of the groups changed since the last call."""
        if self.records is None:
            self.groups.take_changed()
            return
        for group_id in self.groups.take_changed():
            try:
                self.records.sync(self.groups.groups[group_id], self._initialized(group_id))
            except OSError:
                logger.exception("share group %s: could not write its state to __consumer_offsets", group_id)

    def _partitions_of(self, topic: str) -> int | None:
        info = self._state.topics.get(topic)
        return info.partitions if info is not None and not info.internal else None

    def config(self, group_id: str):
        return self._state.group_configs.get(group_id)

    def group_type_taken(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer or classic group (a group id has one type)."""
        from ..coordinator.group_types import group_type
        return group_type(self._state, group_id) is not None and group_id not in self.groups.groups

    # -- membership -----------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, subscribed, rack_id, *,
                  client_id: str, client_host: str) -> tuple[ShareMember | None, bool]:
        if self.groups.group(group_id) is None and self.group_type_taken(group_id):
            raise GroupIdNotFoundError(f"Group {group_id} is not a share group.")
        cfg = self.config(group_id)
        m, send = self.groups.heartbeat(group_id, member_id, member_epoch, subscribed, rack_id,
                                        client_id=client_id, client_host=client_host,
                                        session_timeout_ms=cfg.share_session_timeout_ms, now_ms=self.now_ms())
        if m is not None:
            for topic, parts in m.assignment.items():
                for p in parts:
                    self.partition(group_id, topic, p)
        self.persist_groups()
        return m, send

    def connection_closed(self, connection_id: int) -> None:
        """A connection closed: the share sessions opened on it end and their members' records are
        released at once (Kafka's share session cache evicts the session and calls onMemberLeave,
        KAFKA-19015), so a member that crashes hands its records back without waiting for the locks."""
        for s in self.sessions.on_connection(connection_id):
            self.sessions.close(s.group_id, s.member_id)
            self.release_member(s.group_id, s.member_id)

    def _member_expired(self, group_id: str, member_id: str) -> None:
        self.sessions.close(group_id, member_id)
        self.release_member(group_id, member_id)

    def end_session(self, group_id: str, member_id: str) -> None:
        """A share session closed by its member (epoch -1 in ShareFetch or ShareAcknowledge): the
        session goes and what the member held is released for the others."""
        self.sessions.close(group_id, member_id)
        self.release_member(group_id, member_id)

    def release_member(self, group_id: str, member_id: str, only: tuple[str, int] | None = None) -> None:
        """Release what the member holds in the group's share partitions (``only`` one of them)."""
        for key, sp in self.partitions.items():
            if key[0] == group_id and (only is None or key[1:] == only) and sp.release_member(member_id):
                self._notify(key)
        self.persist(group_id)

    def expire(self) -> None:
        """Expire member sessions and acquisition locks that ran out."""
        now = self.now_ms()
        self._take_stored()
        self.groups.expire(now)
        self.persist_groups()
        for key, sp in self.partitions.items():
            if sp.expire_locks(now):
                self._notify(key)

    def _notify(self, key: Key) -> None:
        # Released records are new data for the group's waiting fetches (they wait on the partition).
        self._state.waiters.notify((key[1], key[2]))

    # -- share partitions -----------------------------------------------------------------------
    def partition(self, group_id: str, topic: str, p: int) -> SharePartition:
        key = (group_id, topic, p)
        sp = self.partitions.get(key)
        info = self._state.topics.get(topic)
        if sp is not None and info is not None and self._topic_ids.get(key) == info.topic_id:
            return sp
        if info is None or not self._state.topics.partition_exists(topic, p):
            raise UnknownTopicOrPartitionError(f"{topic}-{p} does not exist")
        # (A topic deleted and created again under its name starts a new share partition.)
        self._topic_ids[key] = info.topic_id
        cfg = self.config(group_id)
        log = self._state.internal_topics.partition_log(topic, p)
        sp = SharePartition(log.log_start_offset, delivery_count_limit=cfg.share_delivery_count_limit,
                            max_in_flight=cfg.share_partition_max_record_locks)
        persisted = self._loaded.pop(key, None)
        if persisted is not None:
            sp.load(persisted.start_offset, persisted.batches)
        else:
            sp.reset_to(self._reset_offset(cfg, log))
        if sp.start_offset < log.log_start_offset:  # deleted by retention meanwhile
            sp.reset_to(log.log_start_offset)
        self.partitions[key] = sp
        self._save(key, sp)
        if persisted is None:  # a share partition initialized: the group's records say so
            self.groups.mark_changed(group_id)
        return sp

    def _reset_offset(self, cfg, log) -> int:
        strategy = cfg.share_auto_offset_reset
        if strategy == "earliest":
            return log.log_start_offset
        duration = cfg.share_auto_offset_reset_duration_ms
        if duration is not None:
            found = log.offset_for_timestamp(time.time_ns() // 1_000_000 - duration)
            return found[0] if found is not None else log.high_watermark
        return log.high_watermark

    def _save(self, key: Key, sp: SharePartition) -> None:
        """Write what changed in the share partition: a ShareUpdate, or a ShareSnapshot when the
        persister wants one (the first write, or enough updates since the last snapshot)."""
        if not sp.has_changes():
            return
        info = self._state.topics.get(key[1])
        if info is None:
            return
        changes = sp.take_changes(snapshot=self.persister.wants_snapshot(key[0], info.topic_id, key[2]))
        if changes is None:
            return
        whole, batches = changes
        self.persister.write(key[0], info.topic_id, key[2], PersistedState(0, sp.start_offset, batches),
                             snapshot=whole)

    def persist(self, group_id: str | None = None) -> None:
        """Write the state of every share partition (of ``group_id``) changed since its last write."""
        for key, sp in self.partitions.items():
            if group_id is None or key[0] == group_id:
                self._save(key, sp)

    # -- fetching -------------------------------------------------------------------------------
    def fetch(self, group_id: str, member_id: str, topic: str, p: int, max_records: int, max_bytes: int,
              committed: bool, *, strict: bool = False) -> FetchedPartition:
        """Acquire up to ``max_records`` records of one partition for the member: the stored
        batches holding them and the acquired offset ranges."""
        sp = self.partition(group_id, topic, p)
        cfg = self.config(group_id)
        log = self._state.internal_topics.partition_log(topic, p)
        if sp.start_offset < log.log_start_offset:
            sp.reset_to(log.log_start_offset)
        limit = log.last_stable_offset if committed else log.high_watermark
        offset = sp.first_acquirable()
        if offset >= limit or max_records <= 0:
            return FetchedPartition(b"", [])
        # Read about what max_records needs, not the request's whole MaxBytes (librdkafka asks for
        # 50 MiB): a deep backlog must not be read into memory for 500 records.
        read_bytes = min(max(max_bytes, 1), max(READ_BYTES_MIN, max_records * READ_BYTES_PER_RECORD))
        slices = log.read(offset, read_bytes, min_one_batch=True, max_offset=limit)
        data = b"".join(s.read() for s in slices)
        batches: list[tuple[int, int]] = []
        control: set[int] = set()  # first offsets of the batches to archive, not deliver
        aborted = self._aborted_offsets(log, offset, slices, data) if committed else set()
        for h in iter_headers(data):
            batches.append((h.base_offset, h.last_offset))
            if h.is_control or (h.is_transactional and (h.producer_id, h.base_offset) in aborted):
                control.add(h.base_offset)
        acquired = sp.acquire(member_id, batches, max_records, cfg.share_record_lock_duration_ms, self.now_ms(),
                              skip=control, strict=strict)
        if not acquired:
            return FetchedPartition(b"", [])
        # Only the batches that hold acquired records go out.
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        out = bytearray()
        for h in iter_headers(data):
            if h.last_offset >= first and h.base_offset <= last:
                out += data[h.position:h.position + h.size]
        return FetchedPartition(bytes(out), acquired)

    @staticmethod
    def _aborted_offsets(log, offset: int, slices, data: bytes) -> set[tuple[int, int]]:
        """(producer id, batch base offset) of the transactional batches in ``data`` that an
        aborted transaction holds (a read_committed share group archives them)."""
        if not slices:
            return set()
        txns = log.aborted_transactions(offset, slices[-1].next_offset)
        out = set()
        for h in iter_headers(data):
            if h.is_transactional and not h.is_control:
                for t in txns:
                    if t.producer_id == h.producer_id and t.first_offset <= h.base_offset < t.last_offset + 1:
                        out.add((h.producer_id, h.base_offset))
        return out

    def acknowledge(self, group_id: str, member_id: str, topic: str, p: int, batches, *,
                    renew_allowed: bool = False) -> None:
        """Apply a partition's acknowledgement batches (all checked first by each batch)."""
        key = (group_id, topic, p)
        sp = self.partitions.get(key)
        info = self._state.topics.get(topic)
        if sp is None or info is None or self._topic_ids.get(key) != info.topic_id:
            raise UnknownTopicOrPartitionError(f"{topic}-{p} has no share partition in group {group_id}")
        cfg = self.config(group_id)
        error: KafkaError | None = None
        for b in batches:
            try:
                sp.acknowledge(member_id, b.first_offset, b.last_offset, list(b.acknowledge_types),
                               cfg.share_record_lock_duration_ms, self.now_ms(), renew_allowed=renew_allowed)
            except KafkaError as exc:
                error = error or exc
        self._notify(key)
        if error is not None:
            raise error

    def next_deadline(self, group_id: str) -> int | None:
        """The earliest acquisition-lock deadline among the group's share partitions."""
        ds = [d for k, sp in self.partitions.items() if k[0] == group_id
              for d in (sp.next_lock_deadline(),) if d is not None]
        return min(ds) if ds else None

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self._state.topics.get(topic)
        return info.topic_id if info is not None else None

    # -- offsets (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) -----
    def start_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> share-partition start offset of every initialized share partition."""
        self.expire()
        out = {(k[1], k[2]): sp.start_offset for k, sp in self.partitions.items() if k[0] == group_id}
        for (g, topic, p), st in self._loaded.items():  # persisted, not in use since the restart
            if g == group_id:
                out.setdefault((topic, p), st.start_offset)
        return out

    def lags(self, group_id: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> share-partition lag (KIP-1226, DescribeShareGroupOffsets v1): the
        records from the start offset to the end of what the group may read (the last stable
        offset for read_committed groups) not yet done with."""
        committed = self.config(group_id).share_read_committed
        out = {}
        for (g, topic, p), sp in self.partitions.items():
            if g == group_id:
                out[(topic, p)] = self._lag(topic, p, sp.start_offset, sp.done_in_flight(), committed)
        for (g, topic, p), st in self._loaded.items():
            if g == group_id and (topic, p) not in out:
                done = sum(min(last, 2**62) - max(first, st.start_offset) + 1 for first, last, state, _c in st.batches
                           if state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED) and last >= st.start_offset)
                out[(topic, p)] = self._lag(topic, p, st.start_offset, done, committed)
        return out

    def _lag(self, topic: str, p: int, start: int, done: int, committed: bool) -> int:
        try:
            log = self._state.internal_topics.partition_log(topic, p)
        except KafkaError:
            return -1  # (Kafka's default: no lag could be computed)
        end = log.last_stable_offset if committed else log.high_watermark
        return max(end - start - done, 0)

    def is_share_group(self, group_id: str) -> bool:
        return self.groups.group(group_id) is not None or any(k[0] == group_id for k in self.partitions) \
            or any(k[0] == group_id for k in self._loaded)

    def require_empty(self, group_id: str) -> None:
        """NON_EMPTY_GROUP unless the share group has no members (Kafka alters and deletes the
        offsets of empty share groups only)."""
        from kwire.protocol.errors import NonEmptyGroupError
        self.expire()
        g = self.groups.group(group_id)
        if g is not None and g.members:
            raise NonEmptyGroupError(f"The group {group_id} is not empty.")

    def alter_start_offset(self, group_id: str, topic: str, p: int, offset: int) -> None:
        """Start the share partition over at ``offset``: everything in flight is forgotten."""
        log = self._state.internal_topics.partition_log(topic, p)
        sp = self.partition(group_id, topic, p)
        sp.reset_to(min(max(offset, log.log_start_offset), log.high_watermark))
        self._save((group_id, topic, p), sp)

    def delete_topic_state(self, group_id: str, topic: str) -> bool:
        """Forget the group's share state of ``topic`` (tombstones in __share_group_state); whether
        there was any."""
        info = self._state.topics.get(topic)
        keys = [k for k in list(self.partitions) + list(self._loaded) if k[0] == group_id and k[1] == topic]
        for key in keys:
            self.partitions.pop(key, None)
            self._loaded.pop(key, None)
            if info is not None:
                self.persister.write(group_id, info.topic_id, key[2], None)
        if keys and group_id in self.groups.groups:
            self.groups.mark_changed(group_id)
            self.persist_groups()
        return bool(keys)

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: 0, or NON_EMPTY_GROUP's code while it has members
        (Kafka deletes only empty groups); its share state is tombstoned."""
        from kwire.protocol.errors import NonEmptyGroupError
        try:
            self.require_empty(group_id)
        except NonEmptyGroupError:
            return NonEmptyGroupError.code
        for topic in {k[1] for k in list(self.partitions) + list(self._loaded) if k[0] == group_id}:
            self.delete_topic_state(group_id, topic)
        for s in self.sessions.of_group(group_id):
            self.sessions.close(group_id, s.member_id)
        if self.groups.group(group_id) is not None and self.records is not None:
            self.records.delete_group(group_id)
        self.groups.delete(group_id)
        return 0

    def list_groups(self, states: list[str], types: list[str]) -> list[ShareGroupListing]:
        """ListGroups' share groups (type "share"), those with share state but no members since a
        restart listed Empty; ``states`` and ``types`` filter case-insensitively, as Kafka's."""
        if types and "share" not in {t.lower() for t in types}:
            return []
        self.expire()  # (takes the groups persisted before a restart)
        ids = set(self.groups.groups) | {k[0] for k in self.partitions} | {k[0] for k in self._loaded}
        wanted = {s.lower() for s in states}
        out = []
        for gid in sorted(ids):
            g = self.groups.group(gid)
            state = g.state if g is not None else "Empty"
            if not wanted or state.lower() in wanted:
                out.append(ShareGroupListing(gid, "share", state))
        return out


@dataclass(frozen=True, slots=True)
class ShareGroupListing:
    group_id: str
    protocol_type: str
    state: str
