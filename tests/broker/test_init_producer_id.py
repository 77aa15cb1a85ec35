"""InitProducerId (api key 22): idempotent producers get ids and epoch bumps.

Transactional ids (the transaction coordinator) are tested in test_transactions_handlers.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kwire.broker.config import BrokerConfig
from kwire.broker.context import RequestContext
from kwire.broker.handlers.producer import handle_init_producer_id
from kwire.broker.handlers.registry import HANDLERS
from kwire.broker.producer_ids import ProducerIdManager
from kwire.broker.storage import PartitionLog
from kwire.protocol import messages
from kwire.protocol.errors import (
    CoordinatorLoadInProgressError,
    InvalidProducerEpochError,
    InvalidRequestError,
)
from kwire.protocol.records import RecordBatchBuilder

Req = messages.InitProducerIdRequest
Resp = messages.InitProducerIdResponse
VERSIONS = range(0, 7)
BUMP_VERSIONS = range(3, 7)
INT16_MAX = 2**15 - 1


@pytest.fixture
def broker(tmp_path):
    ids = ProducerIdManager(tmp_path)
    yield SimpleNamespace(producer_ids=ids, config=BrokerConfig(data_dir=tmp_path))
    ids.close()


def call(broker, version: int, **fields) -> Resp:
    """Encode the request at ``version``, decode it, handle it, and return the response as a
    client would read it at that version."""
    fields.setdefault("transactional_id", None)
    fields.setdefault("transaction_timeout_ms", 60_000)
    wire = Req(**fields).encode(version)
    ctx = RequestContext(broker=broker, api_key=22, api_version=version, correlation_id=7, client_id="test",
                         client_host="127.0.0.1:5555", connection_id=1)
    response = handle_init_producer_id(ctx, Req.decode(wire, version))
    return Resp.decode(response.encode(version), version)


def result(resp: Resp) -> tuple[int, int, int]:
    assert resp.throttle_time_ms == 0
    return resp.error_code, resp.producer_id, resp.producer_epoch


def test_registered_for_every_version_the_codec_knows():
    entry = HANDLERS[22]
    assert (entry.min_version, entry.max_version) == (Req.SPEC.min_version, Req.SPEC.max_version) == (0, 6)
    assert entry.fn is handle_init_producer_id


@pytest.mark.parametrize("version", VERSIONS)
def test_new_idempotent_producer_gets_a_fresh_id_at_epoch_zero(broker, version):
    first = result(call(broker, version))
    second = result(call(broker, version, transaction_timeout_ms=1))  # the timeout means nothing here
    assert first == (0, 0, 0)
    assert second == (0, 1, 0)


@pytest.mark.parametrize("version", BUMP_VERSIONS)
def test_epoch_bump_keeps_the_id(broker, version):
    pid = broker.producer_ids.allocate()
    assert result(call(broker, version, producer_id=pid, producer_epoch=0)) == (0, pid, 1)
    assert result(call(broker, version, producer_id=pid, producer_epoch=41)) == (0, pid, 42)
    assert broker.producer_ids.next_id == pid + 1  # no id spent on a bump


@pytest.mark.parametrize("version", BUMP_VERSIONS)
def test_exhausted_epoch_gets_a_new_id(broker, version):
    pid = broker.producer_ids.allocate()
    # Kafka's limit: epochs up to 32766 (Short.MAX_VALUE - 1) are handed out, then the id rotates.
    assert result(call(broker, version, producer_id=pid, producer_epoch=INT16_MAX - 2)) == (0, pid, INT16_MAX - 1)
    assert result(call(broker, version, producer_id=pid, producer_epoch=INT16_MAX - 1)) == (0, pid + 1, 0)
    assert result(call(broker, version, producer_id=pid, producer_epoch=INT16_MAX)) == (0, pid + 2, 0)


@pytest.mark.parametrize("version", BUMP_VERSIONS)
def test_bump_of_an_id_never_allocated_gives_a_new_id(broker, version):
    broker.producer_ids.allocate()
    claimed = broker.producer_ids.next_id + 5  # a later producer could be given this id
    assert result(call(broker, version, producer_id=claimed, producer_epoch=3)) == (0, 1, 0)


@pytest.mark.parametrize("version", BUMP_VERSIONS)
@pytest.mark.parametrize("pid, epoch", [(0, -1), (-1, 0), (-7, 2), (0, -9)])
def test_id_and_epoch_must_come_together(broker, version, pid, epoch):
    broker.producer_ids.allocate()
    assert result(call(broker, version, producer_id=pid, producer_epoch=epoch)) == (InvalidRequestError.code, -1, -1)


@pytest.mark.parametrize("version", range(0, 3))
def test_before_v3_a_request_cannot_ask_for_a_bump(broker, version):
    pid = broker.producer_ids.allocate()
    ctx = RequestContext(broker=broker, api_key=22, api_version=version, correlation_id=1, client_id=None,
                         client_host="127.0.0.1:1", connection_id=1)
    # Fields a v0-2 request can't carry are ignored even if set on the object.
    request = Req(transactional_id=None, transaction_timeout_ms=0, producer_id=pid, producer_epoch=4)
    assert result(handle_init_producer_id(ctx, request)) == (0, pid + 1, 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_transactional_id_is_invalid(broker, version):
    assert result(call(broker, version, transactional_id="")) == (InvalidRequestError.code, -1, -1)


def test_v6_two_phase_commit_fields_do_not_matter_without_transactional_id(broker):
    assert result(call(broker, 6, enable2_pc=True, keep_prepared_txn=True)) == (0, 0, 0)


def test_allocation_failure_is_a_retriable_error(broker, monkeypatch):
    def fail():
        raise CoordinatorLoadInProgressError("no block")

    monkeypatch.setattr(broker.producer_ids, "allocate", fail)
    assert result(call(broker, 4)) == (CoordinatorLoadInProgressError.code, -1, -1)


def test_granted_ids_work_against_a_partition(broker, tmp_path):
    """End to end: the id and the bumped epoch as a partition sees them."""
    log = PartitionLog(tmp_path / "t-0")

    def batch(pid, epoch, seq):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        b.append(b"k", b"v", 1_000)
        return b.build()

    _, pid, epoch = result(call(broker, 5))
    log.append(batch(pid, epoch, 0))
    log.append(batch(pid, epoch, 1))
    _, same, bumped = result(call(broker, 5, producer_id=pid, producer_epoch=epoch))
    assert (same, bumped) == (pid, epoch + 1)
    assert log.append(batch(pid, bumped, 0)) == (2, 2)  # the new epoch restarts at sequence 0
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(pid, epoch, 2))  # the old epoch is fenced
    log.close()
