"""Moving a data dir's group journal (kwire before __consumer_offsets) into the topic, once.

Earlier kwire kept the groups in ``<data dir>/__kwire/groups/journal.log`` (see ``store``).  At
the first start with the topic, everything the journal holds (each group's metadata, committed
offsets, offsets staged by open transactions) is written to ``__consumer_offsets`` and flushed,
and only then is the journal renamed ``journal.log.migrated``: a crash in between leaves the
journal in place and the next start migrates it again (writing the same state twice is harmless:
the newest record of a key wins).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..storage._files import fsync_dir
from .offsets_topic import OffsetsTopicStore
from .store import JOURNAL_NAME, GroupStore

__all__ = ["journal_to_migrate", "migrate_journal", "MIGRATED_SUFFIX"]

logger = logging.getLogger("kwire.broker.coordinator")

MIGRATED_SUFFIX = ".migrated"


def journal_to_migrate(directory: Path) -> bool:
    """Whether ``directory`` holds a journal still to migrate (the coordinator then loads its
    partitions before the broker listens, and migrates it into them)."""
    return (Path(directory) / JOURNAL_NAME).exists()


def migrate_journal(store: OffsetsTopicStore, directory: Path) -> bool:
    """Write the journal in ``directory`` (if any) into ``store`` and retire it; whether it did."""
    path = Path(directory) / JOURNAL_NAME
    if not path.exists():
        return False
    journal = GroupStore(path.parent, fsync="never")  # replays it; stops on a record it can't apply
    try:
        groups = dict(journal.groups)
    finally:
        journal.close()
    offsets = staged = 0
    for group_id, stored in groups.items():
        if stored.record is not None:
            store.put_group(stored.record)
        if stored.offsets:
            store.put_offsets(group_id, stored.offsets, fsync=False)
            offsets += len(stored.offsets)
        for producer_id, pending in stored.pending.items():
            # The journal kept no epoch; the transaction's marker ends these whatever its epoch.
            store.put_txn_offsets(group_id, producer_id, pending, fsync=False, producer_epoch=0)
            staged += len(pending)
    store.flush()  # on disk before the journal goes, whatever the fsync policy
    os.replace(path, path.with_name(path.name + MIGRATED_SUFFIX))
    fsync_dir(path.parent)
    logger.info("migrated %s to __consumer_offsets: %d group(s), %d committed offset(s), %d staged by open "
                "transactions; the journal is now %s", path, len(groups), offsets, staged, path.name + MIGRATED_SUFFIX)
    return True
