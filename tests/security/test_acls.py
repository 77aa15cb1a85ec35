"""ACL bindings, filters, the authorizer's decisions (Kafka's rules), and the ACL file."""

from __future__ import annotations

import json
import logging
import os

import pytest

from kwire.broker.auth import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclStore,
    Authorizer,
    PatternType,
    PermissionType,
    ResourceType,
)
from kwire.broker.auth.acls import check_binding

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, PermissionType
ALLOW, DENY = Perm.ALLOW, Perm.DENY


def acl(principal, op, rtype, name, pattern=Pat.LITERAL, permission=ALLOW, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


@pytest.fixture
def store(tmp_path):
    return AclStore(tmp_path)


def test_decisions(store):
    store.add([
        acl("User:alice", Op.READ, Res.TOPIC, "app-", Pat.PREFIXED),
        acl("User:alice", Op.WRITE, Res.TOPIC, "app-orders"),
        acl("User:alice", Op.READ, Res.TOPIC, "app-secret", permission=DENY),
        acl("User:*", Op.DESCRIBE, Res.TOPIC, "*"),
        acl("User:bob", Op.ALL, Res.GROUP, "g"),
        acl("User:bob", Op.ALTER_CONFIGS, Res.TOPIC, "cfg"),
        acl("User:carol", Op.READ, Res.TOPIC, "lan", host="10.0.0.1"),
        acl("User:dave", Op.ALL, Res.TOPIC, "*", permission=DENY),
        acl("User:dave", Op.READ, Res.TOPIC, "x"),
    ])
    authz = Authorizer(store, ["User:root"])

    def ok(principal, op, rtype, name, host="127.0.0.1"):
        return authz.authorize(principal, host, op, rtype, name)

    assert ok("User:alice", Op.READ, Res.TOPIC, "app-anything")           # prefix
    assert not ok("User:alice", Op.WRITE, Res.TOPIC, "app-anything")      # other operation
    assert ok("User:alice", Op.WRITE, Res.TOPIC, "app-orders")            # literal
    assert not ok("User:alice", Op.READ, Res.TOPIC, "app-secret")         # deny wins over the prefix allow
    assert ok("User:alice", Op.DESCRIBE, Res.TOPIC, "app-secret")         # ... only for READ: User:* DESCRIBE
    assert ok("User:alice", Op.DESCRIBE, Res.TOPIC, "app-x")              # READ implies DESCRIBE too
    assert ok("User:zed", Op.DESCRIBE, Res.TOPIC, "any")                  # User:* on the literal "*"
    assert not ok("User:zed", Op.READ, Res.TOPIC, "any")
    assert ok("User:bob", Op.DELETE, Res.GROUP, "g") and not ok("User:bob", Op.READ, Res.GROUP, "g2")
    assert ok("User:bob", Op.DESCRIBE_CONFIGS, Res.TOPIC, "cfg")          # implied by ALTER_CONFIGS
    assert ok("User:carol", Op.READ, Res.TOPIC, "lan", host="10.0.0.1")
    assert not ok("User:carol", Op.READ, Res.TOPIC, "lan", host="10.0.0.2")
    assert not ok("User:dave", Op.READ, Res.TOPIC, "x")                   # DENY ALL on "*" beats the allow
    assert ok("User:root", Op.ALTER, Res.CLUSTER, "kafka-cluster")         # super user
    assert not ok("User:alice", Op.READ, Res.GROUP, "nothing")            # no ACL at all: deny (Kafka default)
    assert Authorizer(store, allow_everyone_if_no_acl_found=True).authorize(
        "User:alice", "h", Op.READ, Res.GROUP, "nothing")
    # WRITE on some topic (InitProducerId): alice yes; bob no; dave's only allow is covered by a deny
    assert authz.authorize_any("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert not authz.authorize_any("User:bob", "h", Op.WRITE, Res.TOPIC)
    assert not authz.authorize_any("User:dave", "h", Op.READ, Res.TOPIC)


def test_cache_follows_changes_made_through_another_store(tmp_path):
    mine, other = AclStore(tmp_path), AclStore(tmp_path)  # e.g. the broker's and `kwire acls`'s
    authz = Authorizer(mine)
    assert not authz.authorize("User:a", "h", Op.READ, Res.TOPIC, "t")
    other.add([acl("User:a", Op.READ, Res.TOPIC, "t")])
    assert authz.authorize("User:a", "h", Op.READ, Res.TOPIC, "t")
    other.remove([AclFilter(principal="User:a")])
    assert not authz.authorize("User:a", "h", Op.READ, Res.TOPIC, "t")


def test_filters():
    lit = acl("User:a", Op.READ, Res.TOPIC, "orders")
    pre = acl("User:a", Op.WRITE, Res.TOPIC, "ord", Pat.PREFIXED)
    star = acl("User:b", Op.READ, Res.TOPIC, "*")
    grp = acl("User:a", Op.READ, Res.GROUP, "orders")
    every = [lit, pre, star, grp]

    def found(f):
        return [b for b in every if f.matches(b)]

    assert found(AclFilter()) == every
    assert found(AclFilter(name="orders")) == [lit, grp]                   # ANY pattern: exact names
    assert found(AclFilter(Res.TOPIC, "orders", Pat.MATCH)) == [lit, pre, star]  # what applies to "orders"
    assert found(AclFilter(Res.TOPIC, None, Pat.PREFIXED)) == [pre]
    assert found(AclFilter(principal="User:b")) == [star]
    assert found(AclFilter(operation=Op.WRITE)) == [pre]
    assert found(AclFilter(permission=DENY)) == []
    assert AclFilter(resource_type=Res.UNKNOWN).problem()


@pytest.mark.parametrize("binding,message", [
    (acl("User:a", Op.READ, Res.USER, "x"), "not supported"),
    (acl("User:a", Op.READ, Res.TOPIC, "x", Pat.MATCH), "not allowed in an ACL"),
    (acl("User:a", Op.READ, Res.TOPIC, ""), "must not be empty"),
    (acl("User:a", Op.ALTER, Res.CLUSTER, "other"), "kafka-cluster"),
    (acl("User:a", Op.ANY, Res.TOPIC, "x"), "operation ANY"),
    (acl("User:a", Op.READ, Res.TOPIC, "x", permission=Perm.ANY), "ALLOW or DENY"),
    (acl("alice", Op.READ, Res.TOPIC, "x"), "User:name"),
    (acl("User:a", Op.READ, Res.TOPIC, "x", host=""), "host"),
])
def test_invalid_bindings(binding, message):
    with pytest.raises(ValueError, match=message):
        check_binding(binding)


def test_file_is_private_survives_reopen_and_a_broken_file_keeps_the_last_good(tmp_path, caplog):
    store = AclStore(tmp_path)
    store.add([acl("User:a", Op.READ, Res.TOPIC, "t")])
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    assert json.loads(store.path.read_text())["acls"][0]["operation"] == "READ"
    assert AclStore(tmp_path).bindings() == store.bindings()
    store.path.write_text("{ not json")
    with caplog.at_level(logging.ERROR):
        assert len(store.bindings()) == 1  # what it had; the broker keeps enforcing it
    assert "unreadable" in caplog.text
    with pytest.raises(ValueError, match="unreadable"):  # and nobody overwrites it blindly
        store.add([acl("User:b", Op.READ, Res.TOPIC, "t")])
