"""The transaction requests through the dispatch path (no sockets): the versions advertised, Kafka's
error codes for bad input at every version, nothing stored when a request is refused, the staged
offsets of TxnOffsetCommit, the markers' completion (and CONCURRENT_TRANSACTIONS meanwhile), read_committed
Fetch and ListOffsets, the admin requests, ACLs, and the coordinator's state across restarts."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import struct

import pytest

from kwire.broker.auth import AclOperation, AclStore, PatternType, PermissionType, ResourceType
from kwire.broker.auth.acls import AclBinding
from kwire.broker.auth.sasl import Session
from kwire.broker.config import load_config
from kwire.broker.dispatch import Reply, dispatch
from kwire.broker.handlers import supported_versions
from kwire.broker.handlers.api_versions import api_versions_response
from kwire.broker.state import BrokerState
from kwire.broker.transactions import TxnState
from kwire.protocol import SplicedBytes, encode_request, messages
from kwire.protocol.errors import (
    ConcurrentTransactionsError,
    GroupAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotEnoughReplicasError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from kwire.protocol.frames import decode_response
from kwire.protocol.records import RecordBatchBuilder, iter_batches

NONE = 0
FENCED, OLD_FENCED = ProducerFencedError.code, InvalidProducerEpochError.code
INIT, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
DESCRIBE_TXNS, LIST_TXNS, WRITE_TXN_MARKERS = 65, 66, 27


def call(state: BrokerState, request, version: int, principal: str | None = None):
    session = None if principal is None else Session(state.security, listener="SASL_PLAINTEXT", sasl=False,
                                                     peer="127.0.0.1:5000", principal=principal)
    result = dispatch(state, encode_request(request, version, 1, client_id="t")[4:], client_host="127.0.0.1:5000",
                      connection_id=1, session=session)
    if inspect.isawaitable(result):
        result = asyncio.run(_wait(result))
    return _decode(result)


def _decode(result):
    assert isinstance(result, Reply)
    data = b"".join(p.read() if isinstance(p, SplicedBytes) else p for p in result.parts)
    return decode_response(data[4:], result.api_key, result.api_version)[1]


async def _wait(awaitable):
    return await awaitable


@pytest.fixture
def state(tmp_path):
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", default_partitions=2))
    create(s, "t", 2)
    yield s
    s.close()


def reopen(state: BrokerState, **settings) -> BrokerState:
    config = state.config.with_(**settings) if settings else state.config
    state.close()
    return BrokerState(config)


def create(state, name: str, partitions: int) -> None:
    R = messages.CreateTopicsRequest
    resp = call(state, R(topics=[R.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                                  assignments=[], configs=[])], timeout_ms=1000), 5)
    assert resp.topics[0].error_code == 0


def init(state, tid: str, version: int = 4, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1,
         principal: str | None = None):
    req = messages.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid,
                                         producer_epoch=epoch)
    resp = call(state, req, version, principal)
    return resp.error_code, resp.producer_id, resp.producer_epoch


def add_partitions(state, tid: str, pid: int, epoch: int, partitions: dict[str, list[int]], version: int = 3,
                   principal: str | None = None) -> dict[tuple[str, int], int]:
    R = messages.AddPartitionsToTxnRequest
    req = R(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in partitions.items()])
    resp = call(state, req, version, principal)
    return {(t.name, p.partition_index): p.partition_error_code for t in resp.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def add_offsets(state, tid: str, pid: int, epoch: int, group: str, version: int = 3, principal=None) -> int:
    req = messages.AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)
    return call(state, req, version, principal).error_code


def end_txn(state, tid: str, pid: int, epoch: int, commit: bool, version: int = 3, principal=None) -> int:
    req = messages.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    return call(state, req, version, principal).error_code


def txn_offset_commit(state, tid, pid, epoch, group, offsets: dict[tuple[str, int], int], version: int = 3,
                      principal=None, generation: int = -1, member: str = "") -> dict[tuple[str, int], int]:
    R = messages.TxnOffsetCommitRequest
    topics: dict[str, list] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata="m"))
    req = R(transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=generation,
            member_id=member, topics=[R.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
    resp = call(state, req, version, principal)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def batch(pid: int, epoch: int, seq: int, n: int = 2, *, transactional: bool = True, tag: bytes = b"v",
          ts: int | None = None) -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional)
    for i in range(n):
        b.append(b"k", tag + b"%d" % (seq + i), None if ts is None else ts + i)
    return b.build()


def produce(state, topic: str, partition: int, records: bytes, tid: str | None, version: int = 9):
    R = messages.ProduceRequest
    req = R(transactional_id=tid, acks=-1, timeout_ms=1000, topic_data=[R.TopicProduceData(
        name=topic, partition_data=[R.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
    return call(state, req, version).responses[0].partition_responses[0]


def fetch(state, topic: str, partition: int, offset: int, isolation: int, version: int = 12):
    R = messages.FetchRequest
    t = R.FetchTopic(topic=topic, partitions=[R.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                                                        partition_max_bytes=1 << 20)])
    req = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation, topics=[t],
            session_epoch=-1)
    return call(state, req, version).responses[0].partitions[0]


def values(records) -> list[bytes]:
    return [r.value for b in iter_batches(bytes(records or b"")) if not b.is_control for r in b]


def end_of(state, topic="t", partition=0) -> int:
    return state.logs.get(topic, partition).log_end_offset


# -- what is advertised ----------------------------------------------------------------------
def _kafka_4_3_top_version(api_key: int) -> int:
    """The newest version of a request in Kafka 4.3's own definitions (../shared/kafka-protocol/messages-4.3)."""
    import json
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol" / "messages-4.3"
    for path in folder.glob("*Request.json"):
        text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)
        doc = json.loads(text)
        if doc["apiKey"] == api_key:
            return int(doc["validVersions"].split("-")[-1])
    raise AssertionError(f"no request with api key {api_key} in {folder}")


def test_api_versions_advertises_exactly_the_transaction_versions_served():
    served = supported_versions()
    # Kafka 4.3's newest versions of every transaction api (KIP-890 part 2 included: EndTxn v5,
    # TxnOffsetCommit v5, AddPartitionsToTxn v4-5 and Produce v12+), checked against its own files.
    for key in (INIT, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT, WRITE_TXN_MARKERS, DESCRIBE_TXNS,
                LIST_TXNS, messages.ProduceRequest.API_KEY):
        assert served[key][1] == _kafka_4_3_top_version(key), key
    assert served[INIT] == (0, 6)
    assert served[ADD_PARTITIONS] == (0, 5)       # v4+ is the broker-to-broker batch (KIP-890)
    assert served[ADD_OFFSETS] == (0, 4)
    assert served[END_TXN] == (0, 5)              # v5 is transactions v2
    assert served[TXN_OFFSET_COMMIT] == (0, 5)    # v5 is transactions v2
    assert served[DESCRIBE_TXNS] == (0, 0)
    assert served[LIST_TXNS] == (0, 2)
    assert served[WRITE_TXN_MARKERS] == (1, 2)     # for admins aborting a hanging transaction (KIP-664)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in api_versions_response().api_keys}
    # Served but not advertised: telemetry, as Kafka without a metrics receiver (KIP-714).
    hidden = set(served) - set(advertised)
    assert hidden == {messages.GetTelemetrySubscriptionsRequest.API_KEY, messages.PushTelemetryRequest.API_KEY}
    assert {k: advertised[k] for k in served if k not in hidden} == {k: v for k, v in served.items() if k not in hidden}


@pytest.mark.parametrize("version", range(1, 7))
def test_find_coordinator_answers_this_broker_for_a_transactional_id(state, version):
    R = messages.FindCoordinatorRequest
    req = R(key_type=1, coordinator_keys=["tx"]) if version >= 4 else R(key="tx", key_type=1)
    resp = call(state, req, version)
    node, code = (resp.coordinators[0].node_id, resp.coordinators[0].error_code) if version >= 4 \
        else (resp.node_id, resp.error_code)
    assert (code, node) == (NONE, state.config.node_id)


# -- InitProducerId --------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 7))
def test_init_producer_id_gives_an_id_and_bumps_its_epoch(state, version):
    err, pid, epoch = init(state, "tx", version)
    assert (err, epoch) == (NONE, 0)
    assert init(state, "tx", version) == (NONE, pid, 1)          # a new producer of the id: epoch bump
    assert init(state, "other", version)[1] != pid
    assert state.transactions.describe("tx").state is TxnState.EMPTY


@pytest.mark.parametrize("version", range(3, 7))
def test_init_with_an_old_epoch_is_fenced(state, version):
    _, pid, _ = init(state, "tx", version)
    init(state, "tx", version)                                  # epoch 1 now
    assert init(state, "tx", version, pid=pid, epoch=1) == (NONE, pid, 2)   # KIP-360 bump with the current one
    assert init(state, "tx", version, pid=pid, epoch=1) == (NONE, pid, 2)   # its retry: the same answer
    code = FENCED if version >= 4 else OLD_FENCED                # v4 brought PRODUCER_FENCED
    assert init(state, "tx", version, pid=pid, epoch=0) == (code, -1, -1)
    assert init(state, "tx", version, pid=pid, epoch=-1) == (InvalidRequestError.code, -1, -1)


@pytest.mark.parametrize("timeout_ms", [0, -5, 900_001])
def test_a_transaction_timeout_over_the_maximum_is_refused(state, timeout_ms):
    assert init(state, "tx", 4, timeout_ms=timeout_ms) == (InvalidTransactionTimeoutError.code, -1, -1)
    assert state.transactions.describe("tx") is None
    assert init(state, "tx", 4, timeout_ms=900_000)[0] == NONE   # transaction.max.timeout.ms, Kafka's default


def test_two_phase_commit_is_not_supported(state):
    req = messages.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000, enable2_pc=True)
    assert call(state, req, 6).error_code == InvalidRequestError.code


def test_reinit_aborts_the_open_transaction_with_a_bumped_epoch(state):
    _, pid, epoch = init(state, "tx")
    assert add_partitions(state, "tx", pid, epoch, {"t": [0, 1]}) == {("t", 0): NONE, ("t", 1): NONE}
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx").error_code == NONE
    log = state.logs.get("t", 0)
    assert log.last_stable_offset == 0
    # fenced (+1), the abort's bump at transaction.version 2 (+1), then the new producer's (+1)
    assert init(state, "tx") == (NONE, pid, epoch + 3)
    assert log.last_stable_offset == log.log_end_offset == 3
    (marker,) = [b for b in iter_batches(b"".join(s.read() for s in log.read(2, 1 << 20)))]
    assert marker.is_control and marker.producer_epoch == epoch + 2  # the fenced epoch, bumped by the v2 abort
    assert [t.producer_id for t in log.aborted_transactions(0, 3)] == [pid]
    assert state.logs.get("t", 1).log_end_offset == 1           # the other partition got its marker too
    # The zombie: its epoch is refused everywhere.
    assert produce(state, "t", 0, batch(pid, epoch, 2), "tx").error_code == InvalidProducerEpochError.code
    assert end_txn(state, "tx", pid, epoch, True, version=1) == OLD_FENCED   # librdkafka's EndTxn v1
    assert end_txn(state, "tx", pid, epoch, True, version=2) == FENCED


# -- AddPartitionsToTxn ------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 4))
def test_add_partitions_with_a_wrong_epoch_or_id_changes_nothing(state, version):
    _, pid, epoch = init(state, "tx")
    fenced = FENCED if version >= 2 else OLD_FENCED
    assert add_partitions(state, "tx", pid, epoch + 1, {"t": [0]}, version) == {("t", 0): fenced}
    assert add_partitions(state, "tx", pid + 1, epoch, {"t": [0]}, version) == {
        ("t", 0): InvalidProducerIdMappingError.code}
    assert add_partitions(state, "nobody", pid, epoch, {"t": [0]}, version) == {
        ("t", 0): InvalidProducerIdMappingError.code}
    txn = state.transactions.describe("tx")
    assert (txn.state, txn.partitions) == (TxnState.EMPTY, set())
    assert add_partitions(state, "tx", pid, epoch, {"t": [0]}, version) == {("t", 0): NONE}
    assert state.transactions.describe("tx").state is TxnState.ONGOING


def test_add_partitions_of_a_missing_partition_fails_the_whole_request(state):
    _, pid, epoch = init(state, "tx")
    assert add_partitions(state, "tx", pid, epoch, {"t": [0, 7], "nope": [0]}) == {
        ("t", 0): OperationNotAttemptedError.code, ("t", 7): UnknownTopicOrPartitionError.code,
        ("nope", 0): UnknownTopicOrPartitionError.code}
    assert state.transactions.describe("tx").partitions == set()


def test_an_internal_topic_cannot_be_added_to_a_transaction(state):
    """Kafka leaves internal topics out of the ones it authorizes for AddPartitionsToTxn."""
    _, pid, epoch = init(state, "tx")
    assert add_partitions(state, "tx", pid, epoch, {"t": [0], "__consumer_offsets": [0]}) == {
        ("t", 0): OperationNotAttemptedError.code, ("__consumer_offsets", 0): TopicAuthorizationFailedError.code}
    assert state.transactions.describe("tx").partitions == set()


# -- Produce of transactional data -------------------------------------------------------------
@pytest.mark.parametrize("version", [3, 9, 11])
def test_transactional_produce_needs_the_partition_in_the_transaction(state, version):
    # Before v12 (transactions v1, KIP-890 part 1) the partition is only verified; v12+ adds it
    # (tests/broker/test_transactions_v2.py).  v11 knows TRANSACTION_ABORTABLE.
    not_added = TransactionAbortableError.code if version >= 11 else InvalidTxnStateError.code
    _, pid, epoch = init(state, "tx")
    refused = produce(state, "t", 0, batch(pid, epoch, 0), "tx", version)
    assert refused.error_code == not_added and refused.base_offset == -1
    assert end_of(state) == 0                                     # nothing stored
    add_partitions(state, "tx", pid, epoch, {"t": [1]})
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", version).error_code == not_added
    assert produce(state, "t", 0, batch(pid, epoch, 0), None, version).error_code == \
        TransactionalIdAuthorizationFailedError.code               # transactional data needs the id (Kafka)
    assert produce(state, "t", 0, batch(pid, epoch, 0), "other", version).error_code == \
        InvalidProducerIdMappingError.code
    assert end_of(state) == 0
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", version).error_code == NONE
    assert end_of(state) == 2
    # Plain batches of other producers are not checked.
    assert produce(state, "t", 0, batch(-1, -1, -1, transactional=False), None, version).error_code == NONE


def test_produce_while_the_transaction_completes_is_retriable(state):
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    state.transactions.describe("tx").state = TxnState.PREPARE_COMMIT  # as while its markers are written
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx").error_code == NotEnoughReplicasError.code
    assert end_of(state) == 0


# -- EndTxn ------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 5))
def test_end_txn_errors(state, version):
    assert end_txn(state, "unknown", 0, 0, True, version) == InvalidProducerIdMappingError.code
    _, pid, epoch = init(state, "tx")
    assert end_txn(state, "tx", pid, epoch, True, version) == InvalidTxnStateError.code   # nothing began
    assert end_txn(state, "tx", pid + 1, epoch, True, version) == InvalidProducerIdMappingError.code
    assert end_txn(state, "tx", pid, epoch + 1, True, version) == (FENCED if version >= 2 else OLD_FENCED)
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    assert end_txn(state, "tx", pid, epoch, True, version) == NONE
    assert end_txn(state, "tx", pid, epoch, True, version) == NONE                  # a retry
    assert end_txn(state, "tx", pid, epoch, False, version) == InvalidTxnStateError.code
    assert state.transactions.describe("tx").state is TxnState.COMPLETE_COMMIT
    assert end_of(state) == 1                                       # one marker, not two


def test_concurrent_transactions_while_the_markers_are_made_durable(tmp_path):
    """fsync "always": EndTxn is answered once its markers are fsynced; meanwhile the transaction
    is PrepareCommit and its producer's next requests are CONCURRENT_TRANSACTIONS (retriable)."""
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", fsync="always"))
    create(state, "t", 1)
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx").error_code == NONE

    def frame(request, version):
        return encode_request(request, version, 1, client_id="t")[4:]

    async def scenario():
        end = dispatch(state, frame(messages.EndTxnRequest(transactional_id="tx", producer_id=pid,
                                                           producer_epoch=epoch, committed=True), 3),
                       client_host="h:1", connection_id=1)
        assert inspect.isawaitable(end)                       # waiting for the group commit
        assert state.transactions.describe("tx").state is TxnState.PREPARE_COMMIT
        again = _decode(dispatch(state, frame(messages.EndTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True), 3),
            client_host="h:1", connection_id=2))
        R = messages.AddPartitionsToTxnRequest
        add = _decode(dispatch(state, frame(R(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[0])]), 3),
            client_host="h:1", connection_id=3))
        reinit = _decode(dispatch(state, frame(messages.InitProducerIdRequest(
            transactional_id="tx", transaction_timeout_ms=1000), 4), client_host="h:1", connection_id=4))
        done = _decode(await end)
        return again.error_code, add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, \
            reinit.error_code, done.error_code

    try:
        assert asyncio.run(scenario()) == (ConcurrentTransactionsError.code,) * 3 + (NONE,)
        assert state.transactions.describe("tx").state is TxnState.COMPLETE_COMMIT
        assert state.durability.flushes >= 1
        log = state.logs.get("t", 0)
        assert log.last_stable_offset == log.log_end_offset == 3 and log.recovery_point == 3  # fsynced
    finally:
        state.close()


def test_reinit_waits_for_the_aborts_markers_to_be_durable(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", fsync="always"))
    create(state, "t", 1)
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")

    async def scenario():
        reply = dispatch(state, encode_request(messages.InitProducerIdRequest(
            transactional_id="tx", transaction_timeout_ms=1000), 4, 1)[4:], client_host="h:1", connection_id=1)
        assert inspect.isawaitable(reply)
        assert state.transactions.describe("tx").state is TxnState.PREPARE_ABORT
        resp = _decode(await reply)
        return resp.error_code, resp.producer_id, resp.producer_epoch

    try:
        assert asyncio.run(scenario()) == (NONE, pid, epoch + 3)  # fence, the v2 abort's bump, the new producer
        log = state.logs.get("t", 0)
        assert log.last_stable_offset == log.log_end_offset == log.recovery_point == 3
    finally:
        state.close()


def test_a_commit_completes_even_if_its_client_hangs_up_while_it_is_made_durable(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", fsync="always"))
    create(state, "t", 1)
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})

    async def scenario():
        end = dispatch(state, encode_request(messages.EndTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True), 3, 1)[4:],
            client_host="h:1", connection_id=1)
        end.close()                                     # the connection closed: nobody awaits the answer
        deadline = asyncio.get_running_loop().time() + 5
        while state.transactions.describe("tx").state is not TxnState.COMPLETE_COMMIT:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)

    try:
        asyncio.run(scenario())
    finally:
        state.close()


def test_a_marker_that_cannot_be_written_is_retried(state, monkeypatch):
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0, 1]})
    produce(state, "t", 1, batch(pid, epoch, 0), "tx")
    log = state.logs.get("t", 1)
    real = log.append_marker

    def broken(*args, **kwargs):
        raise KafkaStorageError("disk on fire")

    monkeypatch.setattr(log, "append_marker", broken)
    assert end_txn(state, "tx", pid, epoch, False) == NONE        # the decision is stored: done for the client
    txn = state.transactions.describe("tx")
    assert (txn.state, txn.partitions) == (TxnState.PREPARE_ABORT, {("t", 1)})  # still owed a marker
    resp = call(state, messages.DescribeTransactionsRequest(transactional_ids=["tx"]), 0)
    assert [(t.topic, t.partitions) for t in resp.transaction_states[0].topics] == [("t", [1])]
    assert add_partitions(state, "tx", pid, epoch, {"t": [0]}) == {("t", 0): ConcurrentTransactionsError.code}
    assert log.last_stable_offset == 0
    monkeypatch.setattr(log, "append_marker", real)
    state.transactions._retry_markers("tx")                        # what the timer does
    assert state.transactions.describe("tx").state is TxnState.COMPLETE_ABORT
    assert log.last_stable_offset == log.log_end_offset == 3
    assert end_of(state, "t", 0) == 1                              # written once, not again


# -- TxnOffsetCommit: staged offsets -------------------------------------------------------------
def offset_fetch(state, group: str, require_stable: bool, version: int = 7):
    R = messages.OffsetFetchRequest
    req = R(group_id=group, topics=[R.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
            require_stable=require_stable)
    p = call(state, req, version).topics[0].partitions[0]
    return p.error_code, p.committed_offset


def commit_plain(state, group: str, offset: int) -> None:
    R = messages.OffsetCommitRequest
    T = R.OffsetCommitRequestTopic
    req = R(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[T(name="t", partitions=[
        T.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="")])])
    assert call(state, req, 7).topics[0].partitions[0].error_code == NONE


@pytest.mark.parametrize("version", range(0, 5))
def test_txn_offsets_become_the_groups_only_when_the_transaction_commits(state, version):
    _, pid, epoch = init(state, "tx")
    commit_plain(state, "g", 3)
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 10}, version) == {
        ("t", 0): TransactionAbortableError.code if version >= 4 else InvalidTxnStateError.code}  # no AddOffsetsToTxn yet
    assert add_offsets(state, "tx", pid, epoch, "g") == NONE
    assert txn_offset_commit(state, "tx", pid, epoch + 1, "g", {("t", 0): 10}, version) == {
        ("t", 0): InvalidProducerEpochError.code}
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 10, ("t", 9): 1}, version) == {
        ("t", 0): NONE, ("t", 9): UnknownTopicOrPartitionError.code}
    assert offset_fetch(state, "g", require_stable=False) == (NONE, 3)     # not the group's yet
    assert offset_fetch(state, "g", require_stable=True) == (UnstableOffsetCommitError.code, -1)  # KIP-447
    assert end_txn(state, "tx", pid, epoch, True) == NONE
    assert offset_fetch(state, "g", require_stable=True) == (NONE, 10)
    # An aborted transaction's offsets vanish.
    add_offsets(state, "tx", pid, epoch, "g")
    txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 20}, version)
    assert end_txn(state, "tx", pid, epoch, False) == NONE
    assert offset_fetch(state, "g", require_stable=True) == (NONE, 10)
    assert state.coordinator.pending_txn_partitions("g") == set()


def test_txn_offset_commit_checks_the_member_from_v3(state):
    _, pid, epoch = init(state, "tx")
    add_offsets(state, "tx", pid, epoch, "g")
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 5}, 3, generation=4, member="m-1") == {
        ("t", 0): messages_error("IllegalGenerationError")}       # no such group generation
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 5}, 2) == {("t", 0): NONE}


def messages_error(name: str) -> int:
    from kwire.protocol import errors
    return getattr(errors, name).code


def test_staged_offsets_and_open_transactions_survive_a_restart(state, tmp_path):
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    add_offsets(state, "tx", pid, epoch, "g")
    txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 42})
    state = reopen(state)
    try:
        txn = state.transactions.describe("tx")
        # As Kafka, the group's __consumer_offsets partition is one of the transaction's.
        group_partition = ("__consumer_offsets", state.coordinator.store.partition_of("g"))
        assert (txn.state, txn.partitions, txn.groups) == (TxnState.ONGOING, {("t", 0), group_partition}, {"g"})
        assert state.logs.get("t", 0).last_stable_offset == 0        # still holds the LSO
        assert state.coordinator.pending_txn_partitions("g") == {("t", 0)}
        assert end_txn(state, "tx", pid, epoch, True) == NONE
        assert offset_fetch(state, "g", require_stable=True) == (NONE, 42)
        state = reopen(state)
        assert offset_fetch(state, "g", require_stable=True) == (NONE, 42)
        assert state.transactions.describe("tx").state is TxnState.COMPLETE_COMMIT
        assert init(state, "tx") == (NONE, pid, epoch + 1)           # epochs go on from the stored one
    finally:
        state.close()


def test_a_transaction_left_preparing_is_completed_at_startup(state):
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    # A crash between storing the decision and writing the markers.
    txn = state.transactions.describe("tx")
    txn.state = TxnState.PREPARE_COMMIT
    state.transactions._save()
    state.logs.get("t", 0).flush()
    state.close(clean=False)
    state = BrokerState(state.config)
    try:
        assert state.transactions.describe("tx").state is TxnState.COMPLETE_COMMIT
        log = state.logs.get("t", 0)
        assert log.last_stable_offset == log.log_end_offset == 3
        assert values(fetch(state, "t", 0, 0, isolation=1).records) == [b"v0", b"v1"]
    finally:
        state.close()


def test_an_open_transaction_the_coordinator_lost_is_aborted_at_startup(state):
    """The state file lost (or behind, after a power cut with fsync "never"): no LSO stays stuck."""
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    state.close()
    for lost in state.data_dir.glob("__transaction_state-*"):  # where the coordinator keeps its state
        shutil.rmtree(lost)
    state = BrokerState(state.config)
    try:
        log = state.logs.get("t", 0)
        assert log.last_stable_offset == log.log_end_offset == 3
        assert [t.producer_id for t in log.aborted_transactions(0, 3)] == [pid]
    finally:
        state.close()


def test_timed_out_transactions_are_aborted_and_their_producer_fenced(state):
    _, pid, epoch = init(state, "tx", timeout_ms=1000)
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    assert state.transactions.abort_timed_out("tx") == NONE           # what its timer does
    log = state.logs.get("t", 0)
    assert log.last_stable_offset == log.log_end_offset == 3
    assert end_txn(state, "tx", pid, epoch, True) == FENCED
    assert produce(state, "t", 0, batch(pid, epoch, 2), "tx").error_code == InvalidProducerEpochError.code
    # The fence (+1), the abort's bump at transaction.version 2 (+1), the new producer's (+1).
    assert init(state, "tx", timeout_ms=1000) == (NONE, pid, epoch + 3)


def test_timeout_timers_run_on_the_event_loop(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "data"))
    create(state, "t", 1)

    async def scenario():
        state.transactions.start()
        _, pid, epoch = init_direct(state, "tx", 150)
        assert state.transactions.add_partitions("tx", pid, epoch, [("t", 0)]) == NONE
        log = state.logs.get("t", 0)
        log.append(batch(pid, epoch, 0))
        assert log.last_stable_offset == 0
        deadline = asyncio.get_running_loop().time() + 5
        while log.last_stable_offset != log.log_end_offset and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        return log.last_stable_offset, log.log_end_offset, state.transactions.describe("tx").state

    try:
        assert asyncio.run(scenario()) == (3, 3, TxnState.COMPLETE_ABORT)
    finally:
        state.close()


def test_an_open_transaction_still_times_out_after_a_restart(state):
    _, pid, epoch = init(state, "tx", timeout_ms=300)
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    state = reopen(state)
    log = state.logs.get("t", 0)

    async def scenario():
        assert log.last_stable_offset == 0
        state.transactions.start()                     # what the server does once it listens
        deadline = asyncio.get_running_loop().time() + 5
        while log.last_stable_offset != log.log_end_offset:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)

    try:
        asyncio.run(scenario())
        assert state.transactions.describe("tx").state is TxnState.COMPLETE_ABORT
        assert end_txn(state, "tx", pid, epoch, True) == FENCED
    finally:
        state.close()


def init_direct(state, tid, timeout_ms):
    result = state.transactions.init_producer_id(tid, timeout_ms)
    return result.error, result.producer_id, result.producer_epoch


# -- read_committed Fetch and ListOffsets -------------------------------------------------------
@pytest.mark.parametrize("version", [4, 7, 12])
def test_fetch_read_committed_stops_at_the_lso_and_lists_aborted_transactions(state, version):
    _, a, ea = init(state, "a")
    _, b, eb = init(state, "b")
    add_partitions(state, "a", a, ea, {"t": [0]})
    add_partitions(state, "b", b, eb, {"t": [0]})
    produce(state, "t", 0, batch(a, ea, 0, tag=b"a"), "a")            # 0-1 aborted below
    produce(state, "t", 0, batch(b, eb, 0, tag=b"b"), "b")            # 2-3 open
    produce(state, "t", 0, batch(-1, -1, -1, transactional=False, tag=b"p"), None)  # 4-5 plain
    end_txn(state, "a", a, ea, False)                                  # marker 6
    committed = fetch(state, "t", 0, 0, isolation=1, version=version)
    assert (committed.high_watermark, committed.last_stable_offset) == (7, 2)
    assert values(committed.records) == [b"a0", b"a1"]                  # the consumer drops them:
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(a, 0)]
    everything = fetch(state, "t", 0, 0, isolation=0, version=version)
    assert values(everything.records) == [b"a0", b"a1", b"b0", b"b1", b"p-1", b"p0"]
    assert everything.last_stable_offset == 2
    assert fetch(state, "t", 0, 2, isolation=1, version=version).records in (b"", None)
    end_txn(state, "b", b, eb, True)                                   # marker 7
    later = fetch(state, "t", 0, 2, isolation=1, version=version)
    assert later.last_stable_offset == 8
    assert values(later.records) == [b"b0", b"b1", b"p-1", b"p0"]
    # A's records end at 1, but its abort (marker at 6) overlaps the range: listed, as Kafka does.
    assert [(t.producer_id, t.first_offset) for t in later.aborted_transactions] == [(a, 0)]
    assert fetch(state, "t", 0, 7, isolation=1, version=version).aborted_transactions == []


def test_list_offsets_read_committed_latest_is_the_lso(state):
    _, pid, epoch = init(state, "tx")
    now = 1_700_000_000_000
    produce(state, "t", 0, batch(-1, -1, -1, transactional=False, ts=now), None)   # 0-1
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0, ts=now + 10), "tx")               # 2-3 open
    R = messages.ListOffsetsRequest
    T = R.ListOffsetsTopic

    def latest(isolation: int, version: int = 5, timestamp: int = -1) -> int:
        req = R(replica_id=-1, isolation_level=isolation, topics=[T(name="t", partitions=[
            T.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
        return call(state, req, version).topics[0].partitions[0].offset

    assert (latest(0), latest(1), latest(1, version=2)) == (4, 2, 2)
    assert (latest(1, timestamp=now + 1), latest(0, timestamp=now + 5)) == (1, 2)
    assert latest(1, timestamp=now + 5) == -1            # found at 2, past the LSO: not there yet
    assert (latest(0, version=7, timestamp=-3), latest(1, version=7, timestamp=-3)) == (3, -1)
    end_txn(state, "tx", pid, epoch, True)
    assert latest(1) == 5


# -- admin ---------------------------------------------------------------------------------------
def test_describe_and_list_transactions(state):
    _, pid, epoch = init(state, "tx", timeout_ms=5000)
    add_partitions(state, "tx", pid, epoch, {"t": [1, 0]})
    _, other, _ = init(state, "idle-1")
    resp = call(state, messages.DescribeTransactionsRequest(transactional_ids=["tx", "idle-1", "missing"]), 0)
    tx, idle, missing = resp.transaction_states
    assert (tx.error_code, tx.transaction_state, tx.transaction_timeout_ms, tx.producer_id, tx.producer_epoch) == (
        NONE, "Ongoing", 5000, pid, epoch)
    assert tx.transaction_start_time_ms > 0 and [(t.topic, t.partitions) for t in tx.topics] == [("t", [0, 1])]
    assert (idle.transaction_state, idle.transaction_start_time_ms, idle.topics) == ("Empty", -1, [])
    assert missing.error_code == TransactionalIdNotFoundError.code
    L = messages.ListTransactionsRequest

    def listed(version=0, **filters):
        resp = call(state, L(state_filters=filters.get("states", []), producer_id_filters=filters.get("pids", []),
                             duration_filter=filters.get("duration", -1), transactional_id_pattern=filters.get("pattern")),
                    version)
        return resp.error_code, sorted((t.transactional_id, t.producer_id, t.transaction_state)
                                       for t in resp.transaction_states), list(resp.unknown_state_filters)

    assert listed() == (NONE, [("idle-1", other, "Empty"), ("tx", pid, "Ongoing")], [])
    assert listed(states=["Ongoing", "Bogus"]) == (NONE, [("tx", pid, "Ongoing")], ["Bogus"])
    assert listed(pids=[other]) == (NONE, [("idle-1", other, "Empty")], [])
    assert listed(1, duration=3_600_000, states=["Ongoing"]) == (NONE, [], [])
    assert listed(2, pattern="idle-.*") == (NONE, [("idle-1", other, "Empty")], [])
    assert listed(2, pattern="(")[0] == InvalidRegularExpressionError.code


# -- ACLs ----------------------------------------------------------------------------------------
def _allow(principal, op, rtype, name, pattern=PatternType.LITERAL):
    return AclBinding(rtype, name, pattern, principal, "*", op, PermissionType.ALLOW)


def test_acls_guard_every_transaction_request(tmp_path):
    Op, Res = AclOperation, ResourceType
    AclStore(tmp_path / "data").add([
        _allow("User:p", Op.WRITE, Res.TRANSACTIONAL_ID, "tx"), _allow("User:p", Op.DESCRIBE, Res.TRANSACTIONAL_ID, "tx"),
        _allow("User:p", Op.WRITE, Res.TOPIC, "t"), _allow("User:p", Op.READ, Res.TOPIC, "t"),
        _allow("User:p", Op.READ, Res.GROUP, "g"), _allow("User:p", Op.DESCRIBE, Res.TOPIC, "t"),
        _allow("User:other", Op.DESCRIBE, Res.TRANSACTIONAL_ID, "tx"),
    ])
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    try:
        create(state, "t", 1)
        create(state, "secret", 1)
        denied = TransactionalIdAuthorizationFailedError.code
        assert init(state, "tx", principal="User:other")[0] == denied
        _, pid, epoch = init(state, "tx", principal="User:p")
        assert add_partitions(state, "tx", pid, epoch, {"t": [0], "secret": [0]}, principal="User:p") == {
            ("t", 0): OperationNotAttemptedError.code, ("secret", 0): TopicAuthorizationFailedError.code}
        assert add_partitions(state, "tx", pid, epoch, {"t": [0]}, principal="User:other") == {("t", 0): denied}
        assert add_partitions(state, "tx", pid, epoch, {"t": [0]}, principal="User:p") == {("t", 0): NONE}
        assert add_offsets(state, "tx", pid, epoch, "g", principal="User:other") == denied
        assert add_offsets(state, "tx", pid, epoch, "h", principal="User:p") == GroupAuthorizationFailedError.code
        assert add_offsets(state, "tx", pid, epoch, "g", principal="User:p") == NONE
        assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 1}, principal="User:other") == {
            ("t", 0): denied}
        assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 1, ("secret", 0): 1},
                                 principal="User:p") == {("t", 0): NONE, ("secret", 0): TopicAuthorizationFailedError.code}
        assert end_txn(state, "tx", pid, epoch, True, principal="User:other") == denied
        resp = call(state, messages.DescribeTransactionsRequest(transactional_ids=["tx"]), 0, "User:nobody")
        assert resp.transaction_states[0].error_code == denied
        resp = call(state, messages.ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0, "User:nobody")
        assert resp.transaction_states == []
        assert end_txn(state, "tx", pid, epoch, True, principal="User:p") == NONE
        R = messages.FindCoordinatorRequest
        assert call(state, R(key="tx", key_type=1), 3, "User:nobody").error_code == denied
        assert call(state, R(key="tx", key_type=1), 3, "User:other").error_code == NONE
    finally:
        state.close()


def test_markers_have_the_producers_id_and_epoch(state):
    _, pid, epoch = init(state, "tx")
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    end_txn(state, "tx", pid, epoch, True)
    raw = b"".join(s.read() for s in state.logs.get("t", 0).read(2, 1 << 20))
    (marker,) = iter_batches(raw)
    marker.validate()
    assert (marker.base_offset, marker.producer_id, marker.producer_epoch, marker.attributes & 0x30) == (
        2, pid, epoch, 0x30)
    (record,) = marker.records()
    assert (record.key, record.value) == (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0))
