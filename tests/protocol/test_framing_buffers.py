"""FrameSplitter's buffer API (get_buffer/buffer_updated, as asyncio.BufferedProtocol and
recv_into use it): the same frames and refusals as feed(), and a frame that does not fit in one
read is received straight into the buffer that is then handed out."""

from __future__ import annotations

import struct
import sys
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwire.protocol import DecodeError, FrameSplitter, FrameTooLargeError
from kwire.protocol.framing import REUSE_MIN_FRAME_SIZE
from tests.tiers import examples


def _frames(bodies, fmt: str = ">i", includes_prefix: bool = False) -> bytes:
    return b"".join(struct.pack(fmt, len(b) + (4 if includes_prefix else 0)) + b for b in bodies)


def _receive(splitter: FrameSplitter, data: bytes, max_read: int | None = None) -> list[bytearray]:
    """Hand ``data`` to the splitter the way recv_into would: at most what get_buffer offers
    (and at most ``max_read``) per call."""
    out: list[bytearray] = []
    pos = 0
    while pos < len(data):
        buf = splitter.get_buffer(-1)
        assert len(buf) > 0  # asyncio refuses an empty buffer
        n = min(len(buf), len(data) - pos, max_read or len(data))
        buf[:n] = data[pos:pos + n]
        pos += n
        out += splitter.buffer_updated(n)
    return out


BODIES = [b"", b"a", b"hello", bytes(range(256)) * 3, b"\x00\x00\x00\x05", b""]


@pytest.mark.parametrize("max_read", [1, 3, 7, 100, None])
def test_same_frames_as_feed_whatever_the_reads(max_read):
    stream = _frames(BODIES)
    got = _receive(FrameSplitter(max_frame_size=1024, receive_buffer_size=64), stream, max_read)
    assert got == BODIES == FrameSplitter(max_frame_size=1024).feed(stream)
    assert all(type(f) is bytearray for f in got)


@given(st.lists(st.binary(max_size=300), max_size=10), st.lists(st.integers(1, 200), min_size=1),
       st.integers(8, 128))
@settings(max_examples=examples(200), deadline=None, database=None)
def test_any_reads_any_receive_buffer(bodies, reads, receive_size):
    stream = _frames(bodies)
    splitter = FrameSplitter(max_frame_size=300, receive_buffer_size=receive_size)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        buf = splitter.get_buffer()
        n = min(len(buf), len(stream) - pos, reads[i % len(reads)])
        buf[:n] = stream[pos:pos + n]
        got += splitter.buffer_updated(n)
        pos += n
        i += 1
    assert got == bodies
    assert splitter.buffered == 0


def test_a_large_frame_is_received_into_the_buffer_handed_out():
    body = bytes(range(256)) * 400  # 100 KiB: more than one read
    splitter = FrameSplitter(receive_buffer_size=1024)
    stream = _frames([body, b"next"])
    first = splitter.get_buffer()
    first[:1024] = stream[:1024]
    assert splitter.buffer_updated(1024) == []
    # From now on the reads land in the frame's own buffer, the one buffer_updated returns.
    rest = splitter.get_buffer()
    assert len(rest) == len(body) - 1020  # the rest of this frame and no more
    target = rest.obj
    rest[:] = stream[1024:4 + len(body)]
    (frame,) = splitter.buffer_updated(len(rest))
    assert frame is target and frame == body
    del rest
    frame += b"!"  # the caller's to keep and change: no view of it is left behind
    assert _receive(splitter, stream[4 + len(body):]) == [b"next"]


def test_frames_outlive_the_receive_buffer():
    splitter = FrameSplitter(receive_buffer_size=64)
    first = _receive(splitter, _frames([b"abc", b"defg"]))
    second = _receive(splitter, _frames([b"XXXXXXXXXXXX", b"YYYY"]))
    first[0][0] = ord("z")
    assert first == [b"zbc", b"defg"] and second == [b"XXXXXXXXXXXX", b"YYYY"]


def test_keep_prefix_little_endian_and_size_including_prefix():
    splitter = FrameSplitter(max_frame_size=100, keep_prefix=True, receive_buffer_size=8)
    assert _receive(splitter, _frames([b"abc", b"0123456789"]), 5) == [
        b"\x00\x00\x00\x03abc", b"\x00\x00\x00\x0a0123456789"]
    mongo = FrameSplitter(max_frame_size=100, byteorder="little", size_includes_prefix=True, receive_buffer_size=8)
    stream = _frames([b"abc", b"0123456789"], "<i", includes_prefix=True)
    assert _receive(mongo, stream, 3) == [b"abc", b"0123456789"]
    with pytest.raises(DecodeError, match="negative frame size"):
        _receive(mongo, struct.pack("<i", 3))


def test_buffered_counts_partial_frames():
    splitter = FrameSplitter(receive_buffer_size=16)
    assert _receive(splitter, b"\x00\x00") == [] and splitter.buffered == 2
    assert _receive(splitter, b"\x00\x20" + b"x" * 20) == [] and splitter.buffered == 24  # in its own buffer now
    assert _receive(splitter, b"y" * 12 + b"\x00") == [b"x" * 20 + b"y" * 12]
    assert splitter.buffered == 1


@pytest.mark.parametrize("size", [0x7FFFFFFF, 101, 2**31 - 4])
def test_a_forged_size_is_refused_before_any_allocation(size):
    splitter = FrameSplitter(max_frame_size=100, receive_buffer_size=1024)
    assert _receive(splitter, _frames([bytes(100)])) == [bytes(100)]  # the maximum itself is fine
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLargeError) as info:
            _receive(splitter, struct.pack(">i", size) + b"xyz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    # The same message as feed() gives.
    with pytest.raises(FrameTooLargeError) as fed:
        FrameSplitter(max_frame_size=100).feed(struct.pack(">i", size))
    assert str(info.value) == str(fed.value)
    with pytest.raises(FrameTooLargeError):  # out of sync: refused from now on
        splitter.get_buffer()
    with pytest.raises(FrameTooLargeError):
        splitter.buffer_updated(1)


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_a_negative_size_is_refused(size):
    splitter = FrameSplitter(max_frame_size=100)
    with pytest.raises(DecodeError) as info:
        _receive(splitter, struct.pack(">i", size))
    with pytest.raises(DecodeError) as fed:
        FrameSplitter(max_frame_size=100).feed(struct.pack(">i", size))
    assert "negative" in str(info.value) and str(info.value) == str(fed.value)
    with pytest.raises(DecodeError):
        splitter.get_buffer()


def test_one_api_per_splitter():
    fed = FrameSplitter()
    fed.feed(b"\x00\x00")
    with pytest.raises(RuntimeError):
        fed.get_buffer()
    received = FrameSplitter()
    _receive(received, b"\x00\x00\x00\x05ab")
    with pytest.raises(RuntimeError):
        received.feed(b"cde")


# -- reuse_frames: the buffers of large frames nobody holds any more ------------------------------

BIG = REUSE_MIN_FRAME_SIZE + 1000


def _big(fill: int, size: int = BIG) -> bytes:
    return bytes([fill]) * size


def test_a_dropped_large_frame_is_reused_for_the_next_one():
    splitter = FrameSplitter(reuse_frames=2)
    (first,) = _receive(splitter, _frames([_big(1)]))
    first_id = id(first)
    del first
    # A little smaller, then a little larger than the first: both fit its allocation.
    (second,) = _receive(splitter, _frames([_big(2, BIG - 300)]))
    assert id(second) == first_id
    assert second == _big(2, BIG - 300)
    del second
    (third,) = _receive(splitter, _frames([_big(3, BIG - 10)]))
    assert id(third) == first_id and third == _big(3, BIG - 10)


def test_a_frame_still_held_or_viewed_is_never_reused():
    splitter = FrameSplitter(reuse_frames=4)
    (held,) = _receive(splitter, _frames([_big(1)]))
    (viewed,) = _receive(splitter, _frames([_big(2)]))
    view = memoryview(viewed)[10:20]
    del viewed  # only the memoryview refers to it now
    (third,) = _receive(splitter, _frames([_big(3)]))
    assert third == _big(3)
    assert held == _big(1) and bytes(view) == bytes([2]) * 10  # untouched
    assert third is not held and view.obj is not third


def test_frames_of_another_size_get_a_new_buffer():
    splitter = FrameSplitter(reuse_frames=2)
    (first,) = _receive(splitter, _frames([_big(1)]))
    first_id = id(first)
    del first
    (larger,) = _receive(splitter, _frames([_big(2, 2 * BIG)]))
    assert id(larger) != first_id and larger == _big(2, 2 * BIG)
    (smaller,) = _receive(splitter, _frames([_big(3, BIG // 2 - 100)]))  # below half of its allocation
    assert smaller == _big(3, BIG // 2 - 100)


def test_only_a_reusing_splitter_keeps_a_reference_to_the_frames_it_hands_out():
    plain, reusing = FrameSplitter(), FrameSplitter(reuse_frames=1)
    (frame,) = _receive(plain, _frames([_big(1)]))
    assert sys.getrefcount(frame) == 2  # this name and getrefcount's argument: the splitter let go
    (frame,) = _receive(reusing, _frames([_big(1)]))
    assert sys.getrefcount(frame) == 3


def test_reuse_frames_keeps_at_most_that_many_buffers():
    splitter = FrameSplitter(reuse_frames=2)
    held = [_receive(splitter, _frames([_big(fill)]))[0] for fill in range(5)]
    assert len(splitter._spares) == 2
    assert [bytes(f[:1]) for f in held] == [bytes([i]) for i in range(5)]  # none was overwritten


def test_reuse_frames_must_not_be_negative():
    with pytest.raises(ValueError, match="reuse_frames"):
        FrameSplitter(reuse_frames=-1)
