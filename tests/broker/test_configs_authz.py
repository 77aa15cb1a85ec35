"""AlterConfigs and IncrementalAlterConfigs under an authorizer: ALTER_CONFIGS on the topic, or on
the cluster for a broker resource, as Kafka checks it (through dispatch, as the other handlers'
authorization tests)."""

from __future__ import annotations

import pytest

from kwire.broker.auth import AclOperation, AclStore, ResourceType
from kwire.broker.config import load_config
from kwire.broker.state import BrokerState
from kwire.protocol import messages
from kwire.protocol.configs import AlterConfigOp, ConfigResourceType
from kwire.protocol.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from tests.security.test_handler_authz import _acl, _create, call


@pytest.fixture
def state(tmp_path):
    AclStore(tmp_path / "data").add([_acl("User:tuner", AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "t")])
    s = BrokerState(load_config(None, data_dir=tmp_path / "data", authorizer=True, super_users=["User:admin"]))
    yield s
    s.close()


def incremental(resource_type: int, name: str, key: str, value: str):
    R = messages.IncrementalAlterConfigsRequest
    return R(validate_only=False, resources=[R.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=[R.AlterConfigsResource.AlterableConfig(
            name=key, config_operation=AlterConfigOp.SET, value=value)])])


def legacy(resource_type: int, name: str, key: str, value: str):
    R = messages.AlterConfigsRequest
    return R(validate_only=False, resources=[R.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[R.AlterConfigsResource.AlterableConfig(name=key, value=value)])])


@pytest.mark.parametrize("build,version", [(incremental, 1), (legacy, 2)])
def test_alter_configs_needs_alter_configs(state, build, version):
    _create(state)
    topic, broker = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
    denied = call(state, "User:nobody", build(topic, "t", "retention.ms", "1000"), version).responses[0]
    assert denied.error_code == TopicAuthorizationFailedError.code
    assert state.topics.get("t").configs == {}
    assert call(state, "User:tuner", build(topic, "t", "retention.ms", "1000"), version).responses[0].error_code == 0
    assert state.topics.get("t").configs == {"retention.ms": "1000"}
    denied = call(state, "User:tuner", build(broker, "1", "log.retention.ms", "1000"), version).responses[0]
    assert denied.error_code == ClusterAuthorizationFailedError.code and state.dynamic_configs.merged() == {}
    assert call(state, "User:admin", build(broker, "1", "log.retention.ms", "1000"), version).responses[0].error_code == 0
    assert state.dynamic_configs.per_broker == {"log.retention.ms": "1000"}
