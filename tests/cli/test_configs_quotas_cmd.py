"""``kwire configs --entity-type users|clients|ips`` (client quotas, as kafka-configs.sh names them): a
real process against kwire's broker; what it changed is checked with kwire's admin client."""

from __future__ import annotations

import json

import pytest

from kwire.broker import EmbeddedBroker
from kwire.client.admin import Admin, QuotaEntity

from .test_topics_cmd import kwire, ok, one_line_error


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


def quotas(bootstrap: str) -> dict:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.describe_client_quotas()


def test_alter_and_describe_user_and_client_quotas(broker):
    b = broker.bootstrap
    out = ok("configs", "alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "producer_byte_rate=1048576,consumer_byte_rate=2097152", "-b", b)
    assert out == "altered client quotas of user=alice: producer_byte_rate=1048576, consumer_byte_rate=2097152\n"
    ok("configs", "alter", "--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name",
       "app", "--set", "request_percentage=25", "-b", b)
    assert quotas(b) == {QuotaEntity.of(user="alice"): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
                         QuotaEntity.of(user=None, client_id="app"): {"request_percentage": 25.0}}
    doc = json.loads(ok("configs", "describe", "--entity-type", "users", "--json", "-b", b))
    assert doc == {"client_quotas": [{"entity": {"user": "alice"},
                                      "quotas": {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}}]}
    table = ok("configs", "describe", "--entity-type", "users", "--entity-default", "--entity-type", "clients", "-b", b)
    assert "client-id=app, user=<default>" in table and "request_percentage" in table and "25" in table
    ok("configs", "alter", "--entity-type", "users", "--entity-name", "alice", "--delete-config",
       "producer_byte_rate,consumer_byte_rate", "-b", b)
    assert QuotaEntity.of(user="alice") not in quotas(b)


def test_bad_quota_input_is_one_line_naming_it(broker):
    b = broker.bootstrap
    err = one_line_error(kwire("configs", "alter", "--entity-type", "clients", "--entity-name", "x", "--set",
                               "producer_byte_rate=-1", "-b", b))
    assert "INVALID_REQUEST" in err and "producer_byte_rate must be a positive number" in err
    err = one_line_error(kwire("configs", "alter", "--entity-type", "clients", "--entity-name", "x", "--set",
                               "producer_byte_rate=fast", "-b", b))
    assert "producer_byte_rate='fast' is not a number" in err
    err = one_line_error(kwire("configs", "alter", "--entity-type", "users", "--set", "producer_byte_rate=1", "-b", b))
    assert "--entity-name or --entity-default" in err
    assert quotas(b) == {}
