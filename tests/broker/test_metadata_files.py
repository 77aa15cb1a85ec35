"""The broker's own metadata files (topic list, cluster id) when they are damaged or gone.

A damaged file stops the start with an error naming it and saying what to do; a lost topic
list is rebuilt from the partitions' directories rather than taken as "every topic was deleted";
a topic deleted in the list but not yet on disk (a crash between the two) is removed.
"""

from __future__ import annotations

import json
import logging

import pytest

from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.protocol import messages
from kwire.protocol.errors import KafkaStorageError

from .conftest import serve
from .test_handlers import batch, create, fetch, offsets_of, produce


def open_state(data_dir) -> BrokerState:
    return BrokerState(load_config(None, data_dir=data_dir, port=9092))


def filled(data_dir) -> dict[tuple[str, int], list[int]]:
    """A data dir holding two topics with records and a group's committed offset, cleanly closed."""
    state = open_state(data_dir)
    create(state, "orders", 3, **{"retention.ms": "3600000"})
    create(state, "audit", 1)
    for p in range(3):
        assert produce(state, "orders", p, batch(4 + p)).error_code == 0
    assert produce(state, "audit", 0, batch(2)).error_code == 0
    R = messages.OffsetCommitRequest
    T = R.OffsetCommitRequestTopic
    serve(state, R(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[T(name="orders", partitions=[
        T.OffsetCommitRequestPartition(partition_index=1, committed_offset=3)])]), 8)
    stored = records(state)
    state.close()
    return stored


def records(state) -> dict[tuple[str, int], list[int]]:
    return {(t, p): offsets_of(fetch(state, t, p, 0).records) for t, p in state.logs.partitions()}


def committed(state, topic: str, partition: int) -> int:
    R = messages.OffsetFetchRequest
    resp = serve(state, R(group_id="g", topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=[partition])]), 7)
    return resp.topics[0].partitions[0].committed_offset


def test_a_lost_topic_list_is_rebuilt_from_the_partitions_directories(tmp_path, caplog):
    data = tmp_path / "data"
    stored = filled(data)
    (data / "__kwire" / "topics.json").unlink()
    with caplog.at_level(logging.WARNING, logger="kwire.broker"):
        state = open_state(data)
    try:
        assert records(state) == stored  # nothing removed
        assert {n: state.topics.get(n).partitions for n in state.topics.names()} == {"orders": 3, "audit": 1}
        assert committed(state, "orders", 1) == 3
        assert produce(state, "orders", 2, batch(1)).error_code == 0  # and it takes writes
        rebuilt = [r.getMessage() for r in caplog.records if "rebuilt" in r.getMessage()]
        assert len(rebuilt) == 2 and all("topics.json is missing" in m for m in rebuilt)
        assert any("topic orders rebuilt" in m and "3 partitions" in m for m in rebuilt)
    finally:
        state.close()
    state = open_state(data)  # the rebuilt list was written
    assert state.topics.stored and sorted(state.topics.names()) == ["audit", "orders"]
    state.close()


def test_a_topic_deleted_from_the_list_before_a_crash_loses_its_directories(tmp_path, caplog):
    # DeleteTopics writes the list first, then removes the directories: a crash between the
    # two leaves directories the list no longer names, and the next start finishes the job.
    data = tmp_path / "data"
    filled(data)
    state = open_state(data)
    state.topics.remove("audit")
    state.close()
    with caplog.at_level(logging.WARNING, logger="kwire.broker"):
        state = open_state(data)
    try:
        assert state.topics.names() == ["orders"]
        # (the group's committed offset is in its __consumer_offsets partition)
        assert {t for t, _ in state.logs.partitions()} == {"orders", "__consumer_offsets"}
        assert not (data / "audit-0").exists()
        assert any("audit have no topic metadata; removing them" in r.getMessage() for r in caplog.records)
    finally:
        state.close()


@pytest.mark.parametrize("damage,says", [
    (lambda text: text[: len(text) // 2], "unreadable topic metadata"),
    (lambda text: text.replace('"partitions"', '"partitionz"'), "topic entry 0: KeyError 'partitions'"),
    (lambda text: json.dumps({"version": 1, "topics": 5}), "the topic list: TypeError"),
    (lambda text: text.replace('"id": "', '"id": "zz', 1), "topic entry 0: ValueError"),
    (lambda text: json.dumps([1, 2]), "a JSON list, not an object"),
    (lambda text: text.replace('"version": 1', '"version": 7'), "unknown version 7"),
], ids=["cut in half", "a key renamed", "topics not a list", "a bad topic id", "not an object", "a newer version"])
def test_a_damaged_topic_list_stops_the_start_naming_the_file_and_the_way_out(tmp_path, damage, says):
    data = tmp_path / "data"
    stored = filled(data)
    path = data / "__kwire" / "topics.json"
    path.write_text(damage(path.read_text()))
    with pytest.raises(ValueError, match=says) as err:
        open_state(data)
    assert str(path) in str(err.value)
    if "unknown version" not in says:
        assert "move it away to rebuild the topic list" in str(err.value)
    path.rename(path.with_suffix(".damaged"))  # the way out it names
    state = open_state(data)
    assert records(state) == stored
    state.close()


@pytest.mark.parametrize("content", [b"", b"\n", b"abc\xfd\n", b"two words\n", b"x" * 300],
                         ids=["empty", "blank", "not ascii", "two words", "too long"])
def test_a_damaged_cluster_id_stops_the_start_naming_the_file(tmp_path, content):
    data = tmp_path / "data"
    filled(data)
    path = data / "__kwire" / "cluster.id"
    good = path.read_text().strip()
    path.write_bytes(content)
    with pytest.raises(KafkaStorageError, match="not a cluster id") as err:
        open_state(data)
    assert str(path) in str(err.value) and "delete it to give this data directory a new id" in str(err.value)
    path.write_text(f"  {good}\n")
    state = open_state(data)
    assert state.cluster_id == good
    state.close()
    path.unlink()
    state = open_state(data)
    assert state.cluster_id != good and len(state.cluster_id) == 22
    state.close()


def test_a_partition_directory_gone_comes_back_empty(tmp_path, caplog):
    import shutil

    data = tmp_path / "data"
    stored = filled(data)
    shutil.rmtree(data / "orders-1")
    with caplog.at_level(logging.WARNING, logger="kwire.broker"):
        state = open_state(data)
    try:
        now = records(state)
        assert now[("orders", 1)] == [] and {k: v for k, v in now.items() if k != ("orders", 1)} == \
            {k: v for k, v in stored.items() if k != ("orders", 1)}
        assert any("orders-1 was missing its log" in r.getMessage() for r in caplog.records)
    finally:
        state.close()
