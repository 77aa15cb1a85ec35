"""kwire's transactional producer against real readers: commits and aborts as read_committed
consumers (kwire's and confluent-kafka's) see them, confluent-kafka's aborts read by kwire's
consumer, offsets sent with a transaction, fencing by a second producer with the same
transactional.id, and mistakes of use.  Each test starts its own broker; every wait is bounded."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest

from kwire.broker import EmbeddedBroker
from kwire.client import (
    Admin,
    AsyncProducer,
    Consumer,
    ConsumerGroupMetadata,
    IllegalStateError,
    NewTopic,
    Producer,
    ProducerConfig,
    ProducerFencedError,
    RecordTooLargeError,
    TopicPartition,
    TransactionAbortedError,
    TransactionAbortRequiredError,
)
from kwire.protocol.errors import MessageTooLargeError
from kwire.settings import ConfigError

from ..broker.clients import confluent_read_all

PARTITIONS = 3
QUIET = {"log_level": 0}


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS) as b:
        yield b


def values(prefix: str, n: int = 30) -> list[tuple[int, bytes]]:
    """(partition, value) pairs spread over the partitions."""
    return [(i % PARTITIONS, b"%s-%d" % (prefix.encode(), i)) for i in range(n)]


def txn_producer(broker: EmbeddedBroker, tid: str, **settings) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": 5, **settings})


# -- readers -------------------------------------------------------------------------------------
def kwire_read_all(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS,
                   timeout: float = 10) -> list[tuple[int, bytes]]:
    """Every record a kwire consumer with ``isolation`` sees, read to the end offsets (the LSO for
    read_committed)."""
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                   "isolation.level": isolation}) as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"kwire {isolation} reader stuck at {len(got)} records"
            got += [(r.partition, r.value) for r in c.poll(0.2)]
        got += [(r.partition, r.value) for r in c.poll(0.2)]  # nothing past the end
    return got


def check_isolation(broker: EmbeddedBroker, topic: str, committed: list, aborted: list, *, confluent: bool = True):
    assert sorted(kwire_read_all(broker.bootstrap, topic, "read_committed")) == sorted(committed)
    assert sorted(kwire_read_all(broker.bootstrap, topic, "read_uncommitted")) == sorted(committed + aborted)
    if confluent:
        assert sorted(confluent_read_all(broker.bootstrap, topic, "read_committed")) == sorted(committed)


# -- commit and abort ----------------------------------------------------------------------------
def test_kwire_commits_and_aborts_as_read_committed_readers_see_them(broker):
    first, aborted, second = values("commit"), values("abort"), values("again", 6)
    delivered = []
    p = txn_producer(broker, "kw-1")
    try:
        p.init_transactions(10)
        p.begin_transaction()
        for partition, value in first:
            p.produce("kw", value, partition=partition, on_delivery=lambda e, m: delivered.append(e))
        p.commit_transaction(10)
        assert delivered == [None] * len(first)  # commit flushed, and ran the callbacks
        p.begin_transaction()
        futures = [p.produce("kw", value, partition=partition) for partition, value in aborted]
        assert p.flush(10) == 0  # written to the log, then aborted
        assert all(f.result(0).offset >= 0 for f in futures)
        p.abort_transaction(10)
        p.begin_transaction()
        for partition, value in second:
            p.produce("kw", value, partition=partition)
        p.commit_transaction(10)
    finally:
        p.close()
    check_isolation(broker, "kw", first + second, aborted)


def test_records_not_yet_sent_fail_when_their_transaction_is_aborted(broker):
    p = txn_producer(broker, "kw-unsent", linger_ms=60_000)  # nothing leaves on its own
    try:
        p.init_transactions(10)
        p.begin_transaction()
        futures = [p.produce("unsent", b"x%d" % i, partition=0) for i in range(5)]
        p.abort_transaction(10)
        for f in futures:
            assert isinstance(f.exception(5), TransactionAbortedError)
        p.begin_transaction()
        p.produce("unsent", b"kept", partition=1)
        p.commit_transaction(10)
    finally:
        p.close()
    assert kwire_read_all(broker.bootstrap, "unsent", "read_uncommitted") == [(1, b"kept")]


def test_async_producer_transactions(broker):
    async def scenario():
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": "async-1"}) as p:
            await p.init_transactions(10)
            p.begin_transaction()
            sent = [await p.send("async", b"c%d" % i, partition=i % PARTITIONS) for i in range(9)]
            await p.commit_transaction(10)
            assert all(f.done() and f.result().offset >= 0 for f in sent)
            p.begin_transaction()
            for i in range(9):
                await p.send("async", b"a%d" % i, partition=i % PARTITIONS)
            await p.abort_transaction(10)

    asyncio.run(scenario())
    committed = [(i % PARTITIONS, b"c%d" % i) for i in range(9)]
    assert sorted(kwire_read_all(broker.bootstrap, "async", "read_committed")) == sorted(committed)


def test_confluent_kafka_aborts_are_skipped_by_kwire_read_committed(broker):
    committed, aborted = values("ck-commit"), values("ck-abort")
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ck-1", "linger.ms": 5,
                                  **QUIET})
    p.init_transactions(10)
    for batch, end in ((committed[:15], "commit"), (aborted, "abort"), (committed[15:], "commit")):
        p.begin_transaction()
        for partition, value in batch:
            p.produce("ck", value=value, partition=partition)
        p.flush(10)
        (p.commit_transaction if end == "commit" else p.abort_transaction)(10)
    check_isolation(broker, "ck", committed, aborted, confluent=False)
    # Whole batches (poll_batches) leave the aborted ones out too.
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                   "isolation.level": "read_committed"}) as c:
        c.assign([TopicPartition("ck", q) for q in range(PARTITIONS)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < len(committed):
            assert time.monotonic() < deadline, got
            for fetched in c.poll_batches(0.2):
                records = fetched.records if fetched.records is not None else \
                    [r for r in fetched.batch.records() if r.offset >= fetched.start]
                got += [(fetched.tp.partition, r.value) for r in records]
    assert sorted(got) == sorted(committed)


# -- offsets in a transaction --------------------------------------------------------------------
def test_send_offsets_commits_them_only_with_the_transaction(broker):
    seed = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        seed.produce("src", b"%d" % i, partition=0)
    seed.close()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"}, topics=["src"])
    p = txn_producer(broker, "ctp-1")
    tp = TopicPartition("src", 0)
    try:
        p.init_transactions(10)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 10:
            assert time.monotonic() < deadline, got
            got += consumer.poll(0.2)
        meta = consumer.consumer_group_metadata()
        assert meta.group_id == "ctp" and meta.generation_id >= 1 and meta.member_id
        p.begin_transaction()
        p.produce("dst", b"half", partition=0)
        p.send_offsets_to_transaction({tp: 5}, meta, 10)
        p.abort_transaction(10)
        assert consumer.committed(tp)[tp] is None  # the aborted transaction's offsets never count
        p.begin_transaction()
        for r in got:
            p.produce("dst", r.value, partition=0)
        # confluent-kafka's form: a list of partitions with offsets
        p.send_offsets_to_transaction([confluent_kafka.TopicPartition("src", 0, 10)], meta, 10)
        p.commit_transaction(10)
        assert consumer.committed(tp)[tp].offset == 10
        # A member the group has rebalanced out is refused (KIP-447): the transaction must abort.
        p.begin_transaction()
        p.produce("dst", b"stale", partition=0)
        with pytest.raises(Exception) as refused:
            p.send_offsets_to_transaction({tp: 10}, ConsumerGroupMetadata("ctp", meta.generation_id + 5,
                                                                           meta.member_id), 10)
        assert "ILLEGAL_GENERATION" in str(refused.value) or "UNKNOWN_MEMBER_ID" in str(refused.value)
        with pytest.raises(TransactionAbortRequiredError):
            p.commit_transaction(10)
        p.abort_transaction(10)
    finally:
        p.close()
        consumer.close()
    assert kwire_read_all(broker.bootstrap, "dst", "read_committed", partitions=1) == \
        [(0, b"%d" % i) for i in range(10)]


# -- fencing and failures ------------------------------------------------------------------------
def test_a_second_producer_with_the_id_fences_the_first(broker):
    old = txn_producer(broker, "fence-1")
    new = txn_producer(broker, "fence-1")
    try:
        old.init_transactions(10)
        old.begin_transaction()
        old.produce("fence", b"zombie", partition=0)
        assert old.flush(10) == 0
        new.init_transactions(10)  # bumps the epoch and aborts old's open transaction
        with pytest.raises(ProducerFencedError, match="fence-1"):
            old.commit_transaction(10)
        for call in (old.begin_transaction, lambda: old.abort_transaction(5),
                     lambda: old.produce("fence", b"more", partition=0)):
            with pytest.raises(ProducerFencedError):  # fatal: no more transactional work
                call()
        new.begin_transaction()
        new.produce("fence", b"new", partition=1)
        new.commit_transaction(10)
    finally:
        old.close()
        new.close()
    assert kwire_read_all(broker.bootstrap, "fence", "read_committed") == [(1, b"new")]


def test_a_record_failing_in_a_transaction_makes_commit_raise_until_aborted(broker):
    p = txn_producer(broker, "abortable-1", max_request_size=1000)
    try:
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("abortable", b"ok", partition=0)
        too_big = p.produce("abortable", b"x" * 2000, partition=0)
        assert isinstance(too_big.exception(5), RecordTooLargeError)
        with pytest.raises(TransactionAbortRequiredError, match="abort_transaction"):
            p.commit_transaction(10)
        with pytest.raises(TransactionAbortRequiredError):
            p.produce("abortable", b"more", partition=0)
        with pytest.raises(TransactionAbortRequiredError):
            p.begin_transaction()
        p.abort_transaction(10)
        p.begin_transaction()
        p.produce("abortable", b"after", partition=0)
        p.commit_transaction(10)
    finally:
        p.close()
    assert kwire_read_all(broker.bootstrap, "abortable", "read_committed", partitions=1) == [(0, b"after")]


# -- mistakes ------------------------------------------------------------------------------------
def test_bad_use_raises_clear_errors(broker):
    p = txn_producer(broker, "misuse-1")
    try:
        with pytest.raises(IllegalStateError, match=r"init_transactions\(\) before begin_transaction"):
            p.begin_transaction()
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.produce("misuse", b"x")
        p.init_transactions(10)
        with pytest.raises(IllegalStateError, match="already called"):
            p.init_transactions(10)
        with pytest.raises(IllegalStateError, match=r"no transaction to commit.*begin_transaction"):
            p.commit_transaction(10)
        with pytest.raises(IllegalStateError, match="no transaction to abort"):
            p.abort_transaction(10)
        with pytest.raises(IllegalStateError, match=r"outside a transaction: call begin_transaction"):
            p.produce("misuse", b"x")
        with pytest.raises(IllegalStateError, match="outside a transaction"):
            p.send_offsets_to_transaction({TopicPartition("misuse", 0): 1}, ConsumerGroupMetadata("g"))
        p.begin_transaction()
        with pytest.raises(IllegalStateError, match="already in progress"):
            p.begin_transaction()
        p.abort_transaction(10)
    finally:
        p.close()
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        with pytest.raises(IllegalStateError, match="transactional.id"):
            plain.init_transactions(1)
        with pytest.raises(IllegalStateError, match="transactional.id"):
            plain.begin_transaction()
    finally:
        plain.close()


def test_transactional_settings():
    config = ProducerConfig.from_settings({"transactional.id": "t", "transaction.timeout.ms": "30000"})
    assert config.enable_idempotence is True and config.transaction_timeout_ms == 30_000
    with pytest.raises(ConfigError, match="transactional.id needs enable.idempotence"):
        ProducerConfig.from_settings({"transactional.id": "t", "enable.idempotence": False})
    with pytest.raises(ConfigError, match="transactional.id needs acks=all"):
        ProducerConfig.from_settings({"transactional.id": "t", "acks": 1})
    with pytest.raises(ConfigError, match="must not be empty"):
        ProducerConfig.from_settings({"transactional.id": ""})



def test_a_batch_the_broker_refuses_is_aborted_and_the_epoch_bumped(broker):
    """A sent batch failing for good leaves a gap in its partition's sequences: the abort asks the
    coordinator for the next epoch (InitProducerId with the current id and epoch, KIP-360), and the
    next transaction's sequences start again at 0 under it."""
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("small", 1, configs={"max.message.bytes": "1000"})])
    p = txn_producer(broker, "bump-1", linger_ms=0)
    try:
        p.init_transactions(10)
        epoch = p._core._txn.epoch
        p.begin_transaction()
        assert p.produce("small", b"fits", partition=0).result(10).offset == 0
        refused = p.produce("small", b"x" * 2000, partition=0)
        assert isinstance(refused.exception(10), MessageTooLargeError)
        with pytest.raises(TransactionAbortRequiredError):
            p.commit_transaction(10)
        p.abort_transaction(10)
        assert p._core._txn.epoch == epoch + 1
        p.begin_transaction()
        p.produce("small", b"after", partition=0)
        p.commit_transaction(10)
    finally:
        p.close()
    assert kwire_read_all(broker.bootstrap, "small", "read_committed", partitions=1) == [(0, b"after")]
