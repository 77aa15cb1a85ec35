"""Fixtures for the broker tests: a BrokerState on a temporary data dir, and a way to serve
request frames through the same dispatch path the network layer uses (no sockets)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from kwire.broker.config import load_config
from kwire.broker.dispatch import Reply, dispatch
from kwire.broker.state import BrokerState
from kwire.protocol import SplicedBytes, encode_request
from kwire.protocol.frames import decode_response


def serve(state: BrokerState, request, version: int, correlation_id: int = 7):
    """Encode ``request`` at ``version``, dispatch it, and return the decoded response (or None)."""
    frame = encode_request(request, version, correlation_id, client_id="test")[4:]
    result = dispatch(state, frame, client_host="127.0.0.1:1", connection_id=1)
    if inspect.isawaitable(result):
        result = asyncio.run(_wait(result))
    if result is None:
        return None
    assert isinstance(result, Reply)
    data = b"".join(p.read() if isinstance(p, SplicedBytes) else p for p in result.parts)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    header, response = decode_response(data[4:], result.api_key, result.api_version)
    assert header.correlation_id == correlation_id
    return response


async def _wait(awaitable):
    return await awaitable


@pytest.fixture
def state(tmp_path):
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", port=9092))
    yield s
    s.close()
