"""The sync facades are made one way (``kwire.client.facade``): each forwarder has its asyncio
twin's parameters and documentation, so the two cannot drift apart."""

from __future__ import annotations

import inspect

import pytest

from kwire.client.admin import Admin, AsyncAdmin
from kwire.client.consumer import AsyncConsumer, Consumer
from kwire.client.share_consumer import AsyncShareConsumer, ShareConsumer

PAIRS = [(Admin, AsyncAdmin), (Consumer, AsyncConsumer), (ShareConsumer, AsyncShareConsumer)]


def _forwarders(facade):
    return {name: fn for name, fn in vars(facade).items() if callable(fn) and hasattr(fn, "__wrapped__")}


@pytest.mark.parametrize(("facade", "twin"), PAIRS, ids=lambda c: c.__name__)
def test_each_forwarder_has_its_twins_signature_and_doc(facade, twin):
    forwarders = _forwarders(facade)
    assert len(forwarders) >= 3, f"{facade.__name__} forwards nothing through kwire.client.facade"
    for name, fn in forwarders.items():
        original = getattr(twin, name)
        assert inspect.signature(fn) == inspect.signature(original), name
        assert inspect.cleandoc(original.__doc__) in fn.__doc__, name


def test_every_public_admin_call_is_in_the_blocking_admin():
    async_calls = {n for n, f in vars(AsyncAdmin).items() if not n.startswith("_") and inspect.iscoroutinefunction(f)}
    assert async_calls - set(dir(Admin)) == set()
