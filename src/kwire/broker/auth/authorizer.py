"""Kafka's ACL decision (as its StandardAuthorizer makes it), over an AclStore.

For a principal, a client host, an operation and a resource:

1. super users are allowed everything;
2. the bindings whose pattern covers the resource (literal name, literal "*", or a prefix) are the
   resource's ACLs; with none, the answer is ``allow_everyone_if_no_acl_found`` (default false);
3. a DENY for the principal (or User:*) and host (or *) with that operation or ALL wins;
4. else an ALLOW with that operation, ALL, or one that implies it: READ, WRITE, DELETE and ALTER
   imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.

Decisions are cached per ACL generation (the store's file changed: the cache starts over).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .acls import AclBinding, AclOperation, AclStore, PatternType, PermissionType, ResourceType

__all__ = ["Authorizer"]

logger = logging.getLogger("kwire.broker.authorizer")

_IMPLIED = {
    AclOperation.DESCRIBE: {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER},
    AclOperation.DESCRIBE_CONFIGS: {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS},
}
_CACHE_LIMIT = 50_000


def _principal_matches(binding: AclBinding, principal: str) -> bool:
    return binding.principal == principal or binding.principal == "User:*"


def _host_matches(binding: AclBinding, host: str) -> bool:
    return binding.host == "*" or binding.host == host


class Authorizer:
    def __init__(self, store: AclStore, super_users: Iterable[str] = (), *,
                 allow_everyone_if_no_acl_found: bool = False):
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._cache: dict[tuple, bool] = {}
        self._generation = -1

    def _bindings(self) -> tuple[AclBinding, ...]:
        bindings = self.store.bindings()  # re-reads the file if it changed on disk
        if self.store.generation != self._generation:
            self._cache.clear()
            self._generation = self.store.generation
        return bindings

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        bindings = self._bindings()
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        allowed = self._decide(bindings, principal, host, operation, resource_type, name)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = allowed
        if not allowed:  # once per decision and ACL generation: the cache keeps repeats quiet
            logger.info("denied %s (host %s) %s on %s %r", principal, host, operation.name, resource_type.name, name)
        return allowed

    def _decide(self, bindings, principal, host, operation, resource_type, name) -> bool:
        acls = [b for b in bindings if b.resource_type == resource_type and b.covers(name)]
        if not acls:
            return self.allow_if_no_acl
        mine = [b for b in acls if _principal_matches(b, principal) and _host_matches(b, host)]
        if any(b.permission == PermissionType.DENY and b.operation in (operation, AclOperation.ALL) for b in mine):
            return False
        allowing = _IMPLIED.get(operation, {operation})
        return any(b.permission == PermissionType.ALLOW and (b.operation == AclOperation.ALL
                                                             or b.operation in allowing) for b in mine)

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of this type allows the operation (Kafka's authorizeByResourceType,
        which InitProducerId uses: WRITE on any topic is enough to be an idempotent producer).

        An ALLOW counts unless a DENY for the principal covers everything it allows: a literal "*",
        a prefix of its name, or the same literal name.
        """
        if principal in self.super_users:
            return True
        bindings = [b for b in self._bindings() if b.resource_type == resource_type]
        if not bindings and self.allow_if_no_acl:
            return True
        mine = [b for b in bindings if _principal_matches(b, principal) and _host_matches(b, host)]
        denies = [b for b in mine if b.permission == PermissionType.DENY and b.operation in (operation, AclOperation.ALL)]
        for allow in mine:
            if allow.permission != PermissionType.ALLOW or allow.operation not in (operation, AclOperation.ALL):
                continue
            if not any(_deny_covers(deny, allow) for deny in denies):
                return True
        return False


def _deny_covers(deny: AclBinding, allow: AclBinding) -> bool:
    if deny.pattern == PatternType.LITERAL:
        return deny.name == "*" or (allow.pattern == PatternType.LITERAL and deny.name == allow.name)
    return allow.name.startswith(deny.name)
