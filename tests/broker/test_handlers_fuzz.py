"""Random requests of every api key and version the broker serves, through the dispatch path.

Each request is a random valid instance of its version (tests/protocol/strategies), with names
steered to the topics and group that exist so that handlers get past "unknown topic", and half
of them with a few bytes overwritten after encoding.  Whatever comes, the broker answers with a
response that encodes at the request's version, sends nothing (acks=0), or closes the
connection; no handler fails, and what was stored before is still there.  (Metadata v10/v11 by
topic id used to fail here: its answer could not be encoded.)
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import uuid

import pytest

from kwire.broker.dispatch import CloseConnection, Reply, dispatch
from kwire.broker.handlers import HANDLERS
from kwire.protocol import SplicedBytes, encode_request
from kwire.protocol.frames import decode_response
from kwire.protocol.messages import request_class
from kwire.protocol.records import RecordBatchBuilder
from tests.tiers import examples

from ..protocol.strategies import random_instance
from .test_handlers import create, fetch, offsets_of, produce

# Random requests per version: 40 in make test, a quarter in make test-fast (tests/tiers.py).
PER_VERSION = examples(40)
NAMES = ["t1", "t2", "g1", "", "__consumer_offsets"]


def _batch(rng: random.Random) -> bytes:
    b = RecordBatchBuilder()
    for i in range(rng.randint(1, 4)):
        b.append(b"k", b"v%d" % i, timestamp=1_700_000_000_000 + i)
    return bytes(b.build())


def _steer(obj, rng: random.Random, topic_ids: list[uuid.UUID]) -> None:
    """Point names, partitions, ids and records of a random request at things that exist, and
    keep waits short (a long poll may otherwise wait as long as the request says)."""
    if isinstance(obj, list):
        for item in obj:
            _steer(item, rng, topic_ids)
        return
    for attr in getattr(type(obj), "__slots__", ()):
        if attr.startswith("_") or not hasattr(obj, attr):
            continue
        value = getattr(obj, attr)
        if attr.endswith("_ms") and isinstance(value, int):
            setattr(obj, attr, rng.choice([0, 5]))
        elif isinstance(value, str) and rng.random() < 0.8:
            setattr(obj, attr, rng.choice(NAMES))
        elif isinstance(value, int) and not isinstance(value, bool) and attr.endswith(("index", "partition")) \
                and rng.random() < 0.6:
            setattr(obj, attr, rng.choice([0, 1, 2, -1]))
        elif attr == "records" and isinstance(value, (bytes, bytearray)) and rng.random() < 0.7:
            setattr(obj, attr, _batch(rng))
        elif attr == "topic_id" and rng.random() < 0.6:
            setattr(obj, attr, rng.choice(topic_ids))
        elif isinstance(value, list) or hasattr(type(value), "__slots__"):
            _steer(value, rng, topic_ids)


async def _answer(state, frame: bytearray):
    """Dispatch as the network layer does; the Reply (or None), or CloseConnection."""
    try:
        result = dispatch(state, frame, client_host="127.0.0.1:1", connection_id=1)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, 10)
    except CloseConnection as exc:
        return exc
    return result


def _requests(key: int, version: int):
    cls = request_class(key)
    rng = random.Random(f"{key}/{version}")
    for i in range(PER_VERSION):
        yield rng, cls, random_instance(cls, version, rng, rich=i % 2 == 0, unknown_tags=False), i % 2 == 1


@pytest.mark.parametrize("key", sorted(HANDLERS))
def test_random_requests_get_an_answer_or_a_close_never_a_failure(state, key, caplog):
    create(state, "t1", 3)
    create(state, "t2", 1)
    create(state, "kept", 1)  # no random name reaches it (see NAMES): its records must stay
    stored = _batch(random.Random(0))
    assert produce(state, "kept", 0, stored).error_code == 0
    topic_ids = [state.topics.get(t).topic_id for t in ("t1", "t2")] + [uuid.uuid4()]
    entry = HANDLERS[key]
    outcomes = {"answered": 0, "silent": 0, "closed": 0}

    async def run() -> None:
        for version in range(entry.min_version, entry.max_version + 1):
            for rng, cls, request, mutate in _requests(key, version):
                _steer(request, rng, topic_ids)
                try:
                    frame = bytearray(encode_request(request, version, 5, client_id="fuzz")[4:])
                except Exception:  # noqa: BLE001 - steering made it unencodable at this version
                    continue
                if mutate:
                    for _ in range(rng.randint(1, 3)):
                        frame[rng.randrange(10, len(frame))] = rng.choice([0, 0xFF, 0x7F, 0x80, 1, rng.randrange(256)])
                with caplog.at_level(logging.ERROR, logger="kwire"):
                    result = await _answer(state, frame)
                failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
                assert not failed, f"{cls.SPEC.name} v{version}: {failed} for {request!r}"
                if isinstance(result, CloseConnection):
                    outcomes["closed"] += 1
                    continue
                if result is None:
                    outcomes["silent"] += 1
                    continue
                assert isinstance(result, Reply)
                data = b"".join(p.read() if isinstance(p, SplicedBytes) else bytes(p) for p in result.parts)
                header, _ = decode_response(data[4:], result.api_key, result.api_version)
                assert header.correlation_id == 5
                outcomes["answered"] += 1

    asyncio.run(run())
    assert outcomes["answered"] > 0, outcomes  # the steering lets requests through to the handler
    assert offsets_of(fetch(state, "kept", 0, 0).records) == offsets_of(stored)
