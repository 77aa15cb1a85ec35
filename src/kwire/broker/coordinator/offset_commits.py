"""Committed offsets of the classic group coordinator: OffsetCommit, TxnOffsetCommit's staged
offsets, OffsetFetch, OffsetDelete, expiry and deleted topics.

Kafka keeps this job apart from the groups' membership (its OffsetMetadataManager beside the
GroupMetadataManager); here it is the ``OffsetCommits`` part of ``GroupCoordinator``, mixed into
it, reading the groups and the store the coordinator owns.

Transactional offsets (TxnOffsetCommit): each transactional producer's offsets are staged per
group (a transactional batch in the group's partition, so they survive a restart) and become the
group's committed offsets only when the transaction coordinator ends its transaction with a
commit (``end_txn_offsets``); an abort drops them.  Until then OffsetFetch with require_stable
answers UNSTABLE_OFFSET_COMMIT for those partitions (KIP-447), so a read_committed consumer does
not start from an offset that may vanish.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidGroupIdError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    UnknownTopicOrPartitionError,
)

from .group import CONSUMER_PROTOCOL_TYPE, Group, GroupState, Member
from .model import OffsetCommitEntry
from .offsets import CommittedOffset, newer_txn_offsets
from .retention import expired_partitions
from .validation import check_offset_commit, check_txn_offset_commit

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..topics import TopicRegistry
    from .offsets_topic import OffsetsTopicStore
    from .timers import Timers

__all__ = ["OFFSET_METADATA_MAX_BYTES", "OffsetCommits"]

logger = logging.getLogger("kwire.broker.coordinator")

OFFSET_METADATA_MAX_BYTES = 4096                    # offset.metadata.max.bytes


class OffsetCommits:
    """The committed-offsets part of ``GroupCoordinator`` (mixed into it)."""

    # What it uses of the coordinator.
    _groups: dict[str, Group]
    _store: OffsetsTopicStore
    _topics: TopicRegistry
    _config: BrokerConfig
    _timers: Timers
    _clock: Callable[[], int]
    _loading: set[int]
    _deleted_while_loading: set[str]
    topics_in_use: Callable[[str], Collection[str]] | None
    on_expiry_check: Callable[[], None] | None

    if TYPE_CHECKING:  # the coordinator's own methods
        def loading(self, group_id: str | None = None) -> bool: ...
        def _register(self, group: Group) -> None: ...
        def _schedule_session(self, group: Group, member: Member) -> None: ...
        def _maybe_remove_empty(self, group: Group) -> None: ...

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       entries: Sequence[OffsetCommitEntry], *, retention_ms: int = -1,
                       api_version: int = 8, defer_fsync: bool = False) -> list[int]:
        """Store offsets; an error code per entry, in order.

        ``generation_id`` -1 with no member id is a commit outside group management (a
        standalone consumer or the admin client), accepted while the group has no members.
        ``retention_ms`` (v2-v4) >= 0 gives these offsets their own expiry time.

        ``defer_fsync``: with fsync "always", return before the journal is fsynced; the caller
        must wait for ``journal_synced()`` before answering.  The new offsets are served to
        OffsetFetch meanwhile (a crash then can only take back offsets nobody was told were
        committed).
        """
        errors, valid = self._commit_checks(group_id, entries)
        if not valid:
            return errors
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation of a group that doesn't exist (v9+ has a name for it).
                error = GroupIdNotFoundError.code if api_version >= 9 else IllegalGenerationError.code
                return [error if i in valid else e for i, e in enumerate(errors)]
            group = Group(group_id, state_timestamp_ms=self._clock())
        error = check_offset_commit(group, generation_id, member_id, group_instance_id)
        if error:
            for i in valid:
                errors[i] = error
            return errors
        now = self._clock()
        expire = now + retention_ms if retention_ms >= 0 else None
        to_store: dict[tuple[str, int], CommittedOffset] = {}
        for i in valid:
            entry = entries[i]
            if _metadata_too_large(entry):
                errors[i] = OffsetMetadataTooLargeError.code
                continue
            committed_at = entry.commit_timestamp_ms if entry.commit_timestamp_ms >= 0 else now
            # Null metadata is stored as "" (Kafka's NoMetadata), so fetches return a string.
            metadata = entry.metadata if entry.metadata is not None else ""
            to_store[(entry.topic, entry.partition)] = CommittedOffset(entry.offset, entry.leader_epoch, metadata,
                                                                       committed_at, expire)
        if to_store:
            try:
                self._store.put_offsets(group_id, to_store, fsync=not defer_fsync)
            except OSError:
                logger.exception("group %s: could not write committed offsets", group_id)
                return [CoordinatorNotAvailableError.code if i in valid and errors[i] == ErrorCode.NONE else errors[i]
                        for i in range(len(entries))]
            group.offsets.update(to_store)
            self._register(group)
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_session(group, member)
        return errors

    def _commit_checks(self, group_id: str, entries: Sequence[OffsetCommitEntry]) -> tuple[list[int], list[int]]:
        """What OffsetCommit and TxnOffsetCommit check first: an error code per entry and the
        indexes of the entries that may go on (none while the group's partition is loading)."""
        self._timers.bind()
        if self.loading(group_id):
            return [CoordinatorLoadInProgressError.code] * len(entries), []
        return self._existing_partitions(entries)

    def _existing_partitions(self, entries: Sequence[OffsetCommitEntry]) -> tuple[list[int], list[int]]:
        """An error code per entry (UNKNOWN_TOPIC_OR_PARTITION for a partition that does not
        exist, else none yet) and the indexes of the entries whose partition exists."""
        errors = [ErrorCode.NONE] * len(entries)
        valid = []
        for i, entry in enumerate(entries):
            if self._topics.partition_exists(entry.topic, entry.partition):
                valid.append(i)
            else:
                errors[i] = UnknownTopicOrPartitionError.code
        return errors, valid

    def commit_txn_offsets(self, group_id: str, producer_id: int, generation_id: int, member_id: str,
                           group_instance_id: str | None, entries: Sequence[OffsetCommitEntry], *,
                           defer_fsync: bool = False, producer_epoch: int = 0) -> list[int]:
        """TxnOffsetCommit: stage offsets for the transaction of ``producer_id``; an error code per
        entry.  The transaction coordinator has checked the producer and that the group is in its
        transaction; here the group checks the member (v3+ send one) as for OffsetCommit.
        ``defer_fsync``: as for ``commit_offsets``."""
        errors, valid = self._commit_checks(group_id, entries)
        if not valid:
            return errors
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return [IllegalGenerationError.code if i in valid else e for i, e in enumerate(errors)]
            group = Group(group_id, state_timestamp_ms=self._clock())  # registered below, once it holds something
        error = check_txn_offset_commit(group, generation_id, member_id, group_instance_id)
        if error:
            return [error if i in valid else e for i, e in enumerate(errors)]
        now = self._clock()
        staged: dict[tuple[str, int], CommittedOffset] = {}
        for i in valid:
            entry = entries[i]
            if _metadata_too_large(entry):
                errors[i] = OffsetMetadataTooLargeError.code
                continue
            staged[(entry.topic, entry.partition)] = CommittedOffset(entry.offset, entry.leader_epoch,
                                                                     entry.metadata or "", now)
        if staged:
            try:
                self._store.put_txn_offsets(group_id, producer_id, staged, fsync=not defer_fsync,
                                            producer_epoch=producer_epoch)
            except OSError:
                logger.exception("group %s: could not write transactional offsets", group_id)
                return [CoordinatorNotAvailableError.code if i in valid and errors[i] == ErrorCode.NONE else errors[i]
                        for i in range(len(entries))]
            group.pending_txn_offsets.setdefault(producer_id, {}).update(staged)
            self._register(group)
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_session(group, member)
        return errors

    def end_txn_offsets(self, group_id: str, producer_id: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended: its staged offsets become the group's
        (commit) or are dropped (abort).  Idempotent: the coordinator may complete a transaction
        again after a restart.  ``OSError`` when the journal can't be written (nothing changed)."""
        group = self._groups.get(group_id)
        if group is None or producer_id not in group.pending_txn_offsets:
            return
        staged = group.pending_txn_offsets[producer_id]
        committed: dict[tuple[str, int], CommittedOffset] = {}
        if commit:
            # Offsets of a topic deleted meanwhile stay deleted.
            live = {tp: c for tp, c in staged.items() if self._topics.partition_exists(*tp)}
            committed = newer_txn_offsets(group.offsets, live)
        stored = self._store.groups.get(group_id)
        written = stored.pending.get(producer_id, {}) if stored is not None else {}
        # Staged for a topic deleted since: the log's marker would commit them at the next replay.
        gone = [tp for tp in written if not self._topics.partition_exists(*tp)] if commit else []
        self._store.end_txn(group_id, producer_id, committed, commit=commit, deleted=gone)
        del group.pending_txn_offsets[producer_id]
        group.offsets.update(committed)
        if committed:
            logger.debug("group %s: transaction of producer %d committed %d offset(s)", group_id, producer_id,
                         len(committed))
        self._maybe_remove_empty(group)

    def groups_with_staged_offsets(self, producer_id: int) -> list[str]:
        """The groups holding offsets the transaction of ``producer_id`` staged."""
        return sorted(g.group_id for g in self._groups.values() if producer_id in g.pending_txn_offsets)

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with offsets staged by an open transaction."""
        group = self._groups.get(group_id)
        return group.pending_txn_partitions if group is not None else set()

    def fetch_offsets(self, group_id: str,
                      partitions: Iterable[tuple[str, int]] | None) -> list[tuple[str, int, CommittedOffset | None]]:
        """Committed offsets of the partitions asked for (None: all the group has), None where none."""
        group = self._groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
        if partitions is None:
            return [(t, p, offsets[(t, p)]) for t, p in sorted(offsets)]
        return [(t, p, offsets.get((t, p))) for t, p in partitions]

    def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: (group error, error per partition).  Offsets of topics members read stay."""
        if not group_id:
            return InvalidGroupIdError.code, {}
        if self.loading(group_id):
            return CoordinatorLoadInProgressError.code, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return GroupIdNotFoundError.code, {}
        if not group.is_(GroupState.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            # Only the consumer protocol says which topics members read; other groups must be empty.
            return NonEmptyGroupError.code, {}
        results: dict[tuple[str, int], int] = {}
        eligible = []
        in_use = self.topics_in_use(group_id) if self.topics_in_use is not None else ()
        for tp in partitions:
            if not self._topics.partition_exists(*tp):
                results[tp] = UnknownTopicOrPartitionError.code
            elif tp[0] in in_use:
                results[tp] = GroupSubscribedToTopicError.code
            elif group.is_(GroupState.EMPTY):
                eligible.append(tp)
            elif group.is_subscribed_to(tp[0]):
                results[tp] = GroupSubscribedToTopicError.code
            else:
                eligible.append(tp)
        try:
            self._store.delete_offsets(group_id, eligible)
        except OSError:
            logger.exception("group %s: could not record deleted offsets", group_id)
            return CoordinatorNotAvailableError.code, {}
        for tp in eligible:
            group.offsets.pop(tp, None)
            results[tp] = ErrorCode.NONE
        self._maybe_remove_empty(group)
        return ErrorCode.NONE, results

    def on_topic_deleted(self, topic: str) -> int:
        """Forget every group's offsets of a deleted topic (a new topic of that name starts over).
        Groups of partitions still loading forget them when they are loaded."""
        if self._loading:
            self._deleted_while_loading.add(topic)
        return self._forget_topic(topic, list(self._groups.values()))

    def _forget_topic(self, topic: str, groups: list[Group]) -> int:
        removed = 0
        for group in groups:
            for staged in group.pending_txn_offsets.values():
                for tp in [tp for tp in staged if tp[0] == topic]:
                    del staged[tp]  # the journal's txn_end lists what commits: these never will
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if gone:
                self._store.delete_offsets(group.group_id, gone)
                for tp in gone:
                    del group.offsets[tp]
                removed += len(gone)
                self._maybe_remove_empty(group)
        return removed

    def expire_offsets(self) -> int:
        """Drop expired offsets (see ``retention``), then Empty groups left with nothing.

        Runs every ``retention_check_interval_ms`` on the loop.  Returns how many offsets went.
        """
        now = self._clock()
        removed = 0
        for group in list(self._groups.values()):
            expired = expired_partitions(group, now, self._config.offsets_retention_ms)
            if expired and self.topics_in_use is not None:
                in_use = self.topics_in_use(group.group_id)
                expired = [tp for tp in expired if tp[0] not in in_use]
            if expired:
                self._store.delete_offsets(group.group_id, expired)
                for tp in expired:
                    del group.offsets[tp]
                removed += len(expired)
                logger.info("group %s: %d committed offset(s) expired", group.group_id, len(expired))
            self._maybe_remove_empty(group)
        if self.on_expiry_check is not None:
            self.on_expiry_check()
        return removed


def _metadata_too_large(entry: OffsetCommitEntry) -> bool:
    """Over offset.metadata.max.bytes (OFFSET_METADATA_MAX_BYTES): OFFSET_METADATA_TOO_LARGE."""
    return entry.metadata is not None and len(entry.metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES
