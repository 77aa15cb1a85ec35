"""SharePartition: acquisition, acknowledgement, lock expiry and delivery counts, with time passed
in (no sleeping)."""

from __future__ import annotations

import pytest

from kwire.broker.share.partition import AcknowledgeType as A
from kwire.broker.share.partition import RecordState as S
from kwire.broker.share.partition import SharePartition
from kwire.protocol.errors import InvalidRecordStateError, InvalidRequestError

LOCK = 30_000


def offsets(ranges):
    return [o for r in ranges for o in range(r.first_offset, r.last_offset + 1)]


def test_each_record_goes_to_one_member_at_a_time():
    sp = SharePartition(0)
    a = sp.acquire("a", [(0, 4), (5, 9)], 5, LOCK, now_ms=0)
    b = sp.acquire("b", [(0, 4), (5, 9)], 5, LOCK, now_ms=0)
    assert offsets(a) == [0, 1, 2, 3, 4] and offsets(b) == [5, 6, 7, 8, 9]
    assert sp.acquire("c", [(0, 4), (5, 9)], 5, LOCK, now_ms=0) == []
    assert [r.delivery_count for r in a + b] == [1, 1]


def test_batches_are_acquired_whole_even_past_max_records():
    sp = SharePartition(0)
    got = sp.acquire("a", [(0, 9), (10, 19)], 3, LOCK, now_ms=0)
    assert offsets(got) == list(range(10))


def test_accept_moves_the_start_offset_and_is_final():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 2)], 10, LOCK, now_ms=0)
    sp.acknowledge("a", 0, 2, [A.ACCEPT], LOCK, now_ms=1)
    assert sp.start_offset == 3 and sp.state_batches() == []
    sp.acknowledge("a", 1, 1, [A.ACCEPT], LOCK, now_ms=2)  # all below the start: skipped, as Kafka
    sp.acquire("a", [(3, 4)], 10, LOCK, now_ms=0)
    with pytest.raises(InvalidRecordStateError):  # partly below the start, partly never acquired
        sp.acknowledge("a", 2, 5, [A.ACCEPT], LOCK, now_ms=2)


def test_acknowledging_records_not_acquired_or_of_another_member_is_invalid_record_state():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 1)], 10, LOCK, now_ms=0)
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("b", 0, 0, [A.ACCEPT], LOCK, now_ms=0)
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("a", 0, 5, [A.ACCEPT], LOCK, now_ms=0)  # 2-5 never acquired
    # All or nothing: the refused batch changed nothing.
    assert sp.state_of(0) == S.ACQUIRED and sp.state_of(1) == S.ACQUIRED


def test_malformed_acknowledgements_are_invalid_requests():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 10, LOCK, now_ms=0)
    with pytest.raises(InvalidRequestError):
        sp.acknowledge("a", 0, 3, [A.ACCEPT, A.ACCEPT], LOCK, now_ms=0)  # neither 1 nor 4 types
    with pytest.raises(InvalidRequestError):
        sp.acknowledge("a", 3, 0, [A.ACCEPT], LOCK, now_ms=0)
    with pytest.raises(InvalidRequestError):
        sp.acknowledge("a", 0, 0, [9], LOCK, now_ms=0)
    with pytest.raises(InvalidRequestError):
        sp.acknowledge("a", 0, 0, [A.RENEW], LOCK, now_ms=0)  # renew not enabled


def test_per_offset_types_release_reject_and_gap():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 10, LOCK, now_ms=0)
    sp.acknowledge("a", 0, 3, [A.ACCEPT, A.RELEASE, A.REJECT, A.GAP], LOCK, now_ms=0)
    assert sp.start_offset == 1
    assert [sp.state_of(o) for o in (1, 2, 3)] == [S.AVAILABLE, S.ARCHIVED, S.ARCHIVED]
    again = sp.acquire("b", [(0, 3)], 10, LOCK, now_ms=0)
    assert offsets(again) == [1] and again[0].delivery_count == 2
    sp.acknowledge("b", 1, 1, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.start_offset == 4  # rejected records are never delivered again


def test_an_expired_lock_makes_the_records_available_with_their_delivery_count():
    sp = SharePartition(0)
    sp.acquire("dead", [(0, 1)], 10, LOCK, now_ms=1000)
    assert sp.next_lock_deadline() == 1000 + LOCK
    assert sp.expire_locks(now_ms=1000 + LOCK - 1) == 0
    assert sp.expire_locks(now_ms=1000 + LOCK) == 2
    got = sp.acquire("alive", [(0, 1)], 10, LOCK, now_ms=1000 + LOCK)
    assert offsets(got) == [0, 1] and got[0].delivery_count == 2
    with pytest.raises(InvalidRecordStateError):  # the dead member's late acknowledgement
        sp.acknowledge("dead", 0, 0, [A.ACCEPT], LOCK, now_ms=1000 + LOCK)


def test_renew_extends_the_lock():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 0)], 10, LOCK, now_ms=0)
    sp.acknowledge("a", 0, 0, [A.RENEW], LOCK, now_ms=20_000, renew_allowed=True)
    assert sp.expire_locks(now_ms=LOCK) == 0
    assert sp.expire_locks(now_ms=20_000 + LOCK) == 1


def test_delivery_count_limit_archives_a_poison_record():
    sp = SharePartition(0, delivery_count_limit=3)
    now = 0
    for attempt in range(1, 4):
        got = sp.acquire("a", [(0, 0)], 10, LOCK, now_ms=now)
        assert offsets(got) == [0] and got[0].delivery_count == attempt
        sp.acknowledge("a", 0, 0, [A.RELEASE], LOCK, now_ms=now)
    assert sp.start_offset == 1  # archived after its third delivery
    assert sp.acquire("a", [(0, 0)], 10, LOCK, now_ms=now) == []
    # The same through lock expiry.
    sp2 = SharePartition(0, delivery_count_limit=2)
    for _ in range(2):
        assert sp2.acquire("a", [(0, 0)], 10, LOCK, now_ms=now)
        now += LOCK
        sp2.expire_locks(now)
    assert sp2.state_of(0) == S.ACKNOWLEDGED and sp2.start_offset == 1


def test_release_member_frees_only_its_records():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 0)], 10, LOCK, now_ms=0)
    sp.acquire("b", [(1, 1)], 10, LOCK, now_ms=0)
    assert sp.release_member("a") == 1
    assert sp.state_of(0) == S.AVAILABLE and sp.state_of(1) == S.ACQUIRED


def test_control_offsets_are_archived_not_delivered():
    sp = SharePartition(0)
    got = sp.acquire("a", [(0, 1), (2, 2)], 10, LOCK, now_ms=0, skip={2})
    assert offsets(got) == [0, 1]
    sp.acknowledge("a", 0, 1, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.start_offset == 3


def test_max_in_flight_limits_new_acquisitions():
    sp = SharePartition(0, max_in_flight=3)
    got = sp.acquire("a", [(0, 9)], 100, LOCK, now_ms=0)
    assert offsets(got) == [0, 1, 2]


def test_state_batches_round_trip_through_load():
    sp = SharePartition(5)
    sp.acquire("a", [(5, 9)], 10, LOCK, now_ms=0)
    sp.acknowledge("a", 5, 9, [A.ACCEPT, A.RELEASE, A.ACCEPT, A.REJECT, A.RELEASE], LOCK, now_ms=0)
    # offset 5 accepted: start 6; 6 available (1), 7 acknowledged, 8 archived, 9 available (1)
    batches = sp.state_batches()
    assert sp.start_offset == 6
    assert batches == [(6, 6, S.AVAILABLE, 1), (7, 7, S.ACKNOWLEDGED, 1), (8, 8, S.ARCHIVED, 1),
                       (9, 9, S.AVAILABLE, 1)]
    loaded = SharePartition(0)
    loaded.load(sp.start_offset, batches)
    assert loaded.end == 10 and loaded.first_acquirable() == 6
    got = loaded.acquire("b", [(5, 9)], 10, LOCK, now_ms=0)
    assert offsets(got) == [6, 9] and all(r.delivery_count == 2 for r in got)


def test_record_limit_mode_splits_batches():
    sp = SharePartition(0)
    got = sp.acquire("a", [(0, 9), (10, 19)], 3, LOCK, now_ms=0, strict=True)
    assert offsets(got) == [0, 1, 2]
    got = sp.acquire("b", [(0, 9), (10, 19)], 3, LOCK, now_ms=0, strict=True)
    assert offsets(got) == [3, 4, 5]


def test_the_in_flight_window_counts_from_the_start_offset():
    sp = SharePartition(0, max_in_flight=4)
    sp.acquire("a", [(0, 1)], 10, LOCK, now_ms=0)
    sp.acknowledge("a", 1, 1, [A.ACCEPT], LOCK, now_ms=0)  # 0 still held: the window is 0-1
    assert offsets(sp.acquire("a", [(2, 9)], 100, LOCK, now_ms=0)) == [2, 3]
    sp.acknowledge("a", 0, 0, [A.ACCEPT], LOCK, now_ms=0)  # start moves to 2
    assert offsets(sp.acquire("a", [(2, 9)], 100, LOCK, now_ms=0)) == [4, 5]


def test_offsets_between_batches_are_archived_so_the_start_offset_passes_them():
    """A compacted log leaves holes between batches: nothing there is ever delivered."""
    sp = SharePartition(0)
    got = sp.acquire("a", [(0, 1), (5, 6)], 10, LOCK, now_ms=0)
    assert offsets(got) == [0, 1, 5, 6] and sp.state_of(3) == S.ARCHIVED
    sp.acknowledge("a", 0, 1, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.start_offset == 5
    sp.acknowledge("a", 5, 6, [A.ACCEPT], LOCK, now_ms=0)
    assert sp.start_offset == 7 and sp.state_batches() == []


def test_loaded_state_with_holes_offers_them_as_never_delivered():
    """Offsets a persisted state leaves out (Kafka writes only what changed) were never delivered."""
    sp = SharePartition(0)
    sp.load(10, [(12, 13, S.ARCHIVED, 1), (16, 16, S.AVAILABLE, 2)])
    assert sp.end == 17 and [sp.state_of(o) for o in (10, 11, 14, 15)] == [S.AVAILABLE] * 4
    got = sp.acquire("a", [(10, 16)], 100, LOCK, now_ms=0)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(10, 11, 1), (14, 15, 1), (16, 16, 3)]


def test_many_acknowledgements_of_one_batch_keep_few_ranges():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 999)], 1000, LOCK, now_ms=0)
    for first in range(0, 1000, 10):  # a member acknowledging in small pieces, in order
        sp.acknowledge("a", first, first + 9, [A.ACCEPT], LOCK, now_ms=0)
        assert len(sp._runs) <= 1
    assert sp.start_offset == 1000
    sp.acquire("a", [(1000, 1999)], 1000, LOCK, now_ms=0)
    sp.acknowledge("a", 1000, 1999, [A.RELEASE if o % 2 else A.ACCEPT for o in range(1000, 2000)], LOCK, now_ms=0)
    assert sp.start_offset == 1001 and sp.in_flight() == 500  # every other one offered again
    got = sp.acquire("b", [(1000, 1999)], 1000, LOCK, now_ms=0)
    assert len(got) == 500 and all(r.delivery_count == 2 for r in got)
