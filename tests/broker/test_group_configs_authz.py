"""GROUP config resources under an authorizer: DESCRIBE_CONFIGS / ALTER_CONFIGS on the group, as
Kafka's AuthHelper checks them (GROUP_AUTHORIZATION_FAILED otherwise), through dispatch; and
ListConfigResources lists the configured groups."""

from __future__ import annotations

import pytest

from kwire.broker.auth import AclOperation, AclStore, ResourceType
from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.protocol import messages
from kwire.protocol.configs import ConfigResourceType, ConfigSource
from kwire.protocol.errors import GroupAuthorizationFailedError, InvalidRequestError
from tests.security.test_handler_authz import _acl, call

from .test_configs_authz import incremental, legacy

GROUP = ConfigResourceType.GROUP


@pytest.fixture
def state(tmp_path):
    AclStore(tmp_path / "data").add([
        _acl("User:tuner", AclOperation.ALTER_CONFIGS, ResourceType.GROUP, "g"),
        _acl("User:reader", AclOperation.DESCRIBE_CONFIGS, ResourceType.GROUP, "g")])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    yield s
    s.close()


def describe(name: str):
    R = messages.DescribeConfigsRequest
    return R(resources=[R.DescribeConfigsResource(resource_type=GROUP, resource_name=name, configuration_keys=None)],
             include_synonyms=True, include_documentation=False)


@pytest.mark.parametrize("build,version", [(incremental, 1), (legacy, 2)])
def test_group_configs_need_alter_configs_on_the_group(state, build, version):
    denied = call(state, "User:reader", build(GROUP, "g", "consumer.session.timeout.ms", "50000"), version)
    assert denied.responses[0].error_code == GroupAuthorizationFailedError.code
    assert state.group_configs.groups() == []
    other = call(state, "User:tuner", build(GROUP, "h", "consumer.session.timeout.ms", "50000"), version)
    assert other.responses[0].error_code == GroupAuthorizationFailedError.code
    ok = call(state, "User:tuner", build(GROUP, "g", "consumer.session.timeout.ms", "50000"), version)
    assert ok.responses[0].error_code == 0
    assert state.group_configs.get("g").consumer_session_timeout_ms == 50000
    empty = call(state, "User:admin", build(GROUP, "", "consumer.session.timeout.ms", "50000"), version)
    assert empty.responses[0].error_code == InvalidRequestError.code


def test_group_configs_need_describe_configs_on_the_group(state):
    state.group_configs.replace("g", {"share.isolation.level": "read_committed"})
    denied = call(state, "User:nobody", describe("g"), 4).results[0]
    assert denied.error_code == GroupAuthorizationFailedError.code and denied.configs == []
    assert call(state, "User:tuner", describe("g"), 4).results[0].error_code == 0  # ALTER_CONFIGS implies it
    [result] = call(state, "User:reader", describe("g"), 4).results
    assert result.error_code == 0
    entries = {c.name: c for c in result.configs}
    assert (entries["share.isolation.level"].value, entries["share.isolation.level"].config_source) == \
        ("read_committed", ConfigSource.GROUP_CONFIG)
    assert entries["share.record.lock.duration.ms"].config_source == ConfigSource.DEFAULT_CONFIG


def test_list_config_resources_lists_configured_groups(state):
    state.group_configs.replace("g", {"share.isolation.level": "read_committed"})
    R = messages.ListConfigResourcesRequest
    listed = call(state, "User:admin", R(resource_types=[GROUP]), 1)
    assert listed.error_code == 0
    assert [(r.resource_type, r.resource_name) for r in listed.config_resources] == [(GROUP, "g")]
