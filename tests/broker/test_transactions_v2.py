"""Transactions v2 (KIP-890 part 2) in the broker, through the dispatch path (no sockets), as a
one-node Kafka 4.3 at transaction.version 2: EndTxn v5 bumps the epoch at every end and answers
it (retries, empty aborts, an exhausted epoch turning into a new producer id), Produce v12+ and
TxnOffsetCommit v5 add partitions and groups themselves, markers carry the bumped epoch so a
stale producer is refused at the partitions too, AddPartitionsToTxn v4-5 (the broker batch), the
coordinator's own aborts, the TransactionLogValue fields, and a cluster an admin set back to
transaction.version 1 (older clients work the same at either level)."""

from __future__ import annotations

import pytest

from kwire.broker.transactions import TxnState
from kwire.broker.transactions.state import EPOCH_EXHAUSTED
from kwire.protocol import messages
from kwire.protocol.coordinator_records import TRANSACTION_STATE_TOPIC, decode_key, decode_value
from kwire.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from kwire.protocol.records import iter_batches

from .test_transactions_handlers import (
    add_offsets,
    add_partitions,
    batch,
    call,
    create,
    end_of,
    fetch,
    init,
    offset_fetch,
    produce,
    reopen,
    txn_offset_commit,
    values,
)
from .test_transactions_handlers import state as state  # noqa: PLC0414 - the fixture, shared

NONE = 0
READ_COMMITTED = 1


def end_txn_v5(state, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    req = messages.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    resp = call(state, req, 5)
    return resp.error_code, resp.producer_id, resp.producer_epoch


def end_txn_v4(state, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    req = messages.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    resp = call(state, req, 4)
    return resp.error_code, pid, epoch


def set_transaction_version(state, level: int) -> None:
    U = messages.UpdateFeaturesRequest.FeatureUpdateKey
    req = messages.UpdateFeaturesRequest(timeout_ms=1000, validate_only=False, feature_updates=[
        U(feature="transaction.version", max_version_level=level, upgrade_type=2)])  # SAFE_DOWNGRADE
    assert call(state, req, 1).error_code == NONE
    assert state.transactions.transaction_version() == level


def finalized(state) -> dict[str, int]:
    return {f.name: f.max_version_level for f in call(state, messages.ApiVersionsRequest(), 3).finalized_features}


def markers(state, topic="t", partition=0) -> list[tuple[int, int]]:
    log = state.logs.get(topic, partition)
    data = b"".join(s.read() for s in log.read(0, 1 << 20))
    return [(b.producer_id, b.producer_epoch) for b in iter_batches(data) if b.is_control]


def stored_values(state, tid: str) -> list:
    """The TransactionLogValue records of ``tid`` in __transaction_state, oldest first, with their versions."""
    out = []
    for partition in state.internal_topics.existing_partitions(TRANSACTION_STATE_TOPIC):
        log = state.internal_topics.existing_log(TRANSACTION_STATE_TOPIC, partition)
        for b in iter_batches(b"".join(s.read() for s in log.read(0, 1 << 24))):
            for r in b:
                key = decode_key(r.key, TRANSACTION_STATE_TOPIC)
                if key.transactional_id == tid and r.value is not None:
                    out.append((int.from_bytes(r.value[:2], "big"), decode_value(key, r.value)))
    return out


def test_a_new_cluster_finalizes_transaction_version_2(state):
    assert finalized(state)["transaction.version"] == 2
    assert state.transactions.transaction_version() == 2


# -- EndTxn v5 -------------------------------------------------------------------------------
def test_every_end_bumps_the_epoch_and_its_markers_carry_the_new_one(state):
    _, pid, epoch = init(state, "tx")
    # No AddPartitionsToTxn: Produce v12+ adds the partition.
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", 12).error_code == NONE
    assert produce(state, "t", 1, batch(pid, epoch, 0), "tx", 12).error_code == NONE
    txn = state.transactions.describe("tx")
    assert (txn.state, txn.partitions, txn.client_tv) == (TxnState.ONGOING, {("t", 0), ("t", 1)}, 2)
    assert end_txn_v5(state, "tx", pid, epoch, True) == (NONE, pid, epoch + 1)
    assert markers(state) == [(pid, epoch + 1)] and markers(state, "t", 1) == [(pid, epoch + 1)]
    assert values(fetch(state, "t", 0, 0, READ_COMMITTED).records) == [b"v0", b"v1"]
    # The next transaction, at the new epoch (its sequences start again at 0), aborted.
    assert produce(state, "t", 0, batch(pid, epoch + 1, 0, tag=b"a"), "tx", 12).error_code == NONE
    assert end_txn_v5(state, "tx", pid, epoch + 1, False) == (NONE, pid, epoch + 2)
    assert markers(state) == [(pid, epoch + 1), (pid, epoch + 2)]
    assert [(t.producer_id, t.first_offset) for t in fetch(state, "t", 0, 0, READ_COMMITTED).aborted_transactions] \
        == [(pid, 3)]
    assert state.transactions.describe("tx").state is TxnState.COMPLETE_ABORT


def test_a_stale_producer_after_the_bump_is_refused_with_kafkas_codes(state):
    _, pid, epoch = init(state, "tx")
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", 12).error_code == NONE
    assert end_txn_v5(state, "tx", pid, epoch, True) == (NONE, pid, epoch + 1)
    before = end_of(state)
    # A zombie of the committed transaction: its epoch is refused by the coordinator and the partition.
    assert produce(state, "t", 0, batch(pid, epoch, 2), "tx", 12).error_code == InvalidProducerEpochError.code
    assert produce(state, "t", 0, batch(pid, epoch, 2), "tx", 9).error_code == InvalidProducerEpochError.code
    assert end_of(state) == before
    # Its EndTxn v5 is a retry (the epoch one behind): the answer again, nothing changes.
    assert end_txn_v5(state, "tx", pid, epoch, True) == (NONE, pid, epoch + 1)
    assert end_txn_v5(state, "tx", pid, epoch, False) == (InvalidTxnStateError.code, -1, -1)
    assert end_of(state) == before
    # Two behind, or a v1 EndTxn of the old epoch: fenced.
    assert end_txn_v5(state, "tx", pid, epoch + 1, True)[0] == InvalidTxnStateError.code  # nothing to commit
    _, pid, epoch = init(state, "tx")                     # a new producer of the id: epoch + 2
    assert end_txn_v5(state, "tx", pid, epoch - 2, True) == (ProducerFencedError.code, -1, -1)
    assert end_txn_v4(state, "tx", pid, epoch - 2, True)[0] == ProducerFencedError.code
    assert call(state, messages.EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch - 2,
                                              committed=True), 1).error_code == InvalidProducerEpochError.code


def test_an_abort_needs_no_open_transaction_but_a_commit_does(state):
    _, pid, epoch = init(state, "tx")
    assert end_txn_v5(state, "tx", pid, epoch, True) == (InvalidTxnStateError.code, -1, -1)
    assert end_txn_v5(state, "tx", pid, epoch, False) == (NONE, pid, epoch + 1)   # Empty -> PrepareAbort
    assert state.transactions.describe("tx").state is TxnState.COMPLETE_ABORT
    assert end_txn_v5(state, "tx", pid, epoch + 1, False) == (NONE, pid, epoch + 2)  # again, a new one
    assert end_txn_v5(state, "tx", pid, epoch + 1, False) == (NONE, pid, epoch + 2)  # a retry of it
    assert end_of(state) == 0                                                       # no marker needed


def test_an_exhausted_epoch_continues_with_a_new_producer_id(state):
    _, pid, _ = init(state, "tx")
    state.transactions.describe("tx").producer_epoch = EPOCH_EXHAUSTED  # as after 32766 transactions
    assert produce(state, "t", 0, batch(pid, EPOCH_EXHAUSTED, 0), "tx", 12).error_code == NONE
    error, new_pid, new_epoch = end_txn_v5(state, "tx", pid, EPOCH_EXHAUSTED, True)
    assert (error, new_epoch) == (NONE, 0) and new_pid != pid
    assert markers(state) == [(pid, EPOCH_EXHAUSTED + 1)]       # the last epoch of the old id
    txn = state.transactions.describe("tx")
    assert (txn.producer_id, txn.producer_epoch, txn.last_producer_id) == (new_pid, 0, pid)
    assert end_txn_v5(state, "tx", pid, EPOCH_EXHAUSTED, True) == (NONE, new_pid, 0)  # a retry
    assert produce(state, "t", 0, batch(new_pid, 0, 0, tag=b"n"), "tx", 12).error_code == NONE
    assert end_txn_v5(state, "tx", new_pid, 0, True) == (NONE, new_pid, 1)
    assert values(fetch(state, "t", 0, 0, READ_COMMITTED).records) == [b"v0", b"v1", b"n0", b"n1"]


# -- implicit partitions and groups ---------------------------------------------------------------
@pytest.mark.parametrize("version", [9, 11])
def test_produce_before_v12_only_verifies_the_partition(state, version):
    _, pid, epoch = init(state, "tx")
    expected = TransactionAbortableError.code if version >= 11 else InvalidTxnStateError.code
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", version).error_code == expected
    assert state.transactions.describe("tx").state is TxnState.EMPTY and end_of(state) == 0


def test_txn_offset_commit_v5_adds_the_group(state):
    _, pid, epoch = init(state, "tx")
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", 12).error_code == NONE
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 1): 7}, 4) == {
        ("t", 1): TransactionAbortableError.code}                     # v4: AddOffsetsToTxn first
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 7}, 5) == {("t", 0): NONE}
    assert "g" in state.transactions.describe("tx").groups
    assert offset_fetch(state, "g", require_stable=False) == (NONE, -1)  # not the group's until committed
    assert end_txn_v5(state, "tx", pid, epoch, True) == (NONE, pid, epoch + 1)
    assert offset_fetch(state, "g", require_stable=True) == (NONE, 7)
    # A stale producer's offsets are refused.
    assert txn_offset_commit(state, "tx", pid, epoch, "g", {("t", 0): 9}, 5) == {
        ("t", 0): InvalidProducerEpochError.code}


# -- AddPartitionsToTxn v4-5: the batch a partition leader sends ------------------------------------
def add_partitions_batch(state, transactions: list[tuple[str, int, int, bool, dict]], version: int = 5,
                         principal: str | None = None):
    R = messages.AddPartitionsToTxnRequest
    req = R(transactions=[R.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify,
        topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in parts.items()])
        for tid, pid, epoch, verify, parts in transactions])
    resp = call(state, req, version, principal)
    return resp.error_code, {r.transactional_id: {(t.name, p.partition_index): p.partition_error_code
                                                  for t in r.topic_results for p in t.results_by_partition}
                             for r in resp.results_by_transaction}


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_batch_verifies_and_adds(state, version):
    _, a, ea = init(state, "a")
    _, b, eb = init(state, "b")
    not_in = TransactionAbortableError.code if version >= 5 else InvalidTxnStateError.code
    assert add_partitions_batch(state, [("a", a, ea, True, {"t": [0]}), ("b", b, eb, False, {"t": [1]})],
                                version) == (NONE, {"a": {("t", 0): not_in}, "b": {("t", 1): NONE}})
    assert state.transactions.describe("b").partitions == {("t", 1)}
    assert state.transactions.describe("b").client_tv == 2                     # v4+ speaks transactions v2
    assert add_partitions_batch(state, [("b", b, eb, True, {"t": [1]})], version) == (NONE, {"b": {("t", 1): NONE}})
    assert add_partitions_batch(state, [("b", b, eb + 1, False, {"t": [0], "nope": [0]})], version)[1] == {
        "b": {("t", 0): 55, ("nope", 0): 3}}  # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION


def test_add_partitions_batch_needs_cluster_action(tmp_path):
    from kwire.broker.auth import AclOperation, AclStore, PatternType, PermissionType, ResourceType
    from kwire.broker.auth.acls import AclBinding
    from kwire.broker.config import load_config
    from kwire.broker.state import BrokerState

    def allow(principal: str, op: AclOperation, resource: ResourceType, name: str) -> AclBinding:
        return AclBinding(resource, name, PatternType.LITERAL, principal, "*", op, PermissionType.ALLOW)

    AclStore(tmp_path / "data").add([allow("User:p", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "b"),
                                     allow("User:p", AclOperation.WRITE, ResourceType.TOPIC, "t"),
                                     allow("User:broker", AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                           "kafka-cluster")])
    state = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    try:
        create(state, "t", 2)
        _, b, eb = init(state, "b", principal="User:p")
        # A client may not send the broker batch (Kafka: v4+ only from brokers); a broker may.
        assert add_partitions_batch(state, [("b", b, eb, False, {"t": [1]})], 5, principal="User:p") == (
            ClusterAuthorizationFailedError.code, {})
        assert add_partitions_batch(state, [("b", b, eb, False, {"t": [1]})], 5, principal="User:broker") == (
            NONE, {"b": {("t", 1): NONE}})
    finally:
        state.close()


# -- older clients on a v2 cluster, and a cluster set back to 1 ----------------------------------
@pytest.mark.parametrize("level", [2, 1])
def test_a_v1_client_keeps_its_epoch_at_either_level(state, level):
    if level != 2:
        set_transaction_version(state, level)
    _, pid, epoch = init(state, "tx")
    for seq, commit in ((0, True), (2, False), (4, True)):
        assert add_partitions(state, "tx", pid, epoch, {"t": [0]}) == {("t", 0): NONE}
        assert add_offsets(state, "tx", pid, epoch, "g") == NONE
        assert produce(state, "t", 0, batch(pid, epoch, seq), "tx", 9).error_code == NONE
        assert end_txn_v4(state, "tx", pid, epoch, commit)[0] == NONE
    assert state.transactions.describe("tx").producer_epoch == epoch
    assert {e for _, e in markers(state)} == {epoch}


@pytest.mark.parametrize("level, bumps", [(2, 2), (1, 1)])
def test_the_coordinators_own_abort_bumps_as_the_clusters_level_says(state, level, bumps):
    if level != 2:
        set_transaction_version(state, level)
    _, pid, epoch = init(state, "tx", timeout_ms=1000)
    add_partitions(state, "tx", pid, epoch, {"t": [0]})
    produce(state, "t", 0, batch(pid, epoch, 0), "tx")
    assert state.transactions.abort_timed_out("tx") == NONE
    assert markers(state) == [(pid, epoch + bumps)]
    assert end_txn_v4(state, "tx", pid, epoch, True)[0] == ProducerFencedError.code
    # v5 (which a level 1 cluster's clients don't send): one epoch behind reads as a retry there.
    assert end_txn_v5(state, "tx", pid, epoch, True)[0] == (ProducerFencedError.code if bumps == 2
                                                            else InvalidTxnStateError.code)
    assert init(state, "tx", timeout_ms=1000) == (NONE, pid, epoch + bumps + 1)


def test_the_stored_records_carry_the_v2_fields_and_survive_a_restart(state):
    _, pid, epoch = init(state, "tx")
    assert produce(state, "t", 0, batch(pid, epoch, 0), "tx", 12).error_code == NONE
    assert end_txn_v5(state, "tx", pid, epoch, True) == (NONE, pid, epoch + 1)
    version, last = stored_values(state, "tx")[-1]
    assert version == 1 and last.client_transaction_version == 2 and last.producer_epoch == epoch + 1
    state = reopen(state)
    try:
        txn = state.transactions.describe("tx")
        assert (txn.state, txn.producer_epoch, txn.client_tv) == (TxnState.COMPLETE_COMMIT, epoch + 1, 2)
        assert end_txn_v5(state, "tx", pid, epoch, True) == (NONE, pid, epoch + 1)     # a retry still known
        # Level 0: Kafka's v0 records (no tagged fields).
        set_transaction_version(state, 0)
        assert produce(state, "t", 0, batch(pid, epoch + 1, 0), "tx", 12).error_code == NONE
        assert stored_values(state, "tx")[-1][0] == 0
        assert finalized(state).get("transaction.version") is None
    finally:
        state.close()
