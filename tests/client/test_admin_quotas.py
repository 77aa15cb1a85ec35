"""kwire's admin client on client quotas: describe / alter (async and sync), filters, validate_only,
and the broker's refusals raised as typed errors naming the entity."""

from __future__ import annotations

import asyncio

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.admin import Admin, AsyncAdmin, QuotaAlteration, QuotaEntity, QuotaFilter
from kwire.protocol.errors import InvalidRequestError

ALICE = QuotaEntity.of(user="alice")
ALICE_APP = QuotaEntity.of(user="alice", client_id="app")
DEFAULT_CLIENT = QuotaEntity.of(client_id=None)


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


def test_sync_alter_describe_and_remove(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.alter_client_quotas([QuotaAlteration(ALICE, {"producer_byte_rate": 1024}),
                                   QuotaAlteration(ALICE_APP, {"consumer_byte_rate": 2048}),
                                   QuotaAlteration(DEFAULT_CLIENT, {"request_percentage": 12.5})])
        assert admin.describe_client_quotas() == {ALICE: {"producer_byte_rate": 1024.0},
                                                  ALICE_APP: {"consumer_byte_rate": 2048.0},
                                                  DEFAULT_CLIENT: {"request_percentage": 12.5}}
        assert set(admin.describe_client_quotas([QuotaFilter.exact("user", "alice")])) == {ALICE, ALICE_APP}
        assert set(admin.describe_client_quotas([QuotaFilter.exact("user", "alice")], strict=True)) == {ALICE}
        assert set(admin.describe_client_quotas([QuotaFilter.default("client-id")])) == {DEFAULT_CLIENT}
        assert set(admin.describe_client_quotas([QuotaFilter.specified("client-id")])) == {ALICE_APP, DEFAULT_CLIENT}
        admin.alter_client_quotas([QuotaAlteration(ALICE, {"producer_byte_rate": None})])
        assert ALICE not in admin.describe_client_quotas()


def test_validate_only_changes_nothing(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.alter_client_quotas([QuotaAlteration(ALICE, {"producer_byte_rate": 1024})], validate_only=True)
        assert admin.describe_client_quotas() == {}
        with pytest.raises(InvalidRequestError, match="must be a Long value"):
            admin.alter_client_quotas([QuotaAlteration(ALICE, {"producer_byte_rate": 0.5})], validate_only=True)


def test_refusals_name_the_entity_and_the_rest_is_applied(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        with pytest.raises(InvalidRequestError, match=r"user=bob.*Invalid configuration key nope"):
            admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(user="bob"), {"nope": 1}),
                                       QuotaAlteration(ALICE, {"producer_byte_rate": 1})])
        assert admin.describe_client_quotas() == {ALICE: {"producer_byte_rate": 1.0}}
        with pytest.raises(InvalidRequestError, match="IP filter component should not be used"):
            admin.describe_client_quotas([QuotaFilter.specified("ip"), QuotaFilter.specified("user")])


def test_async_admin(broker):
    async def run():
        admin = AsyncAdmin({"bootstrap.servers": broker.bootstrap})
        try:
            await admin.alter_client_quotas([QuotaAlteration(QuotaEntity.of(ip="127.0.0.1"),
                                                             {"connection_creation_rate": 10})])
            return await admin.describe_client_quotas([QuotaFilter.specified("ip")])
        finally:
            await admin.close()

    assert asyncio.run(run()) == {QuotaEntity.of(ip="127.0.0.1"): {"connection_creation_rate": 10.0}}
