"""The broker's security: who a connection is (SASL, TLS), and what it may do (ACLs).

* ``credentials``: SCRAM credentials in the data dir (salted and hashed, never a password).
* ``sasl``: one connection's login, SaslHandshake -> SaslAuthenticate (or v0 raw tokens).
* ``acls``: ACL bindings and filters, persisted in the data dir; ``authorizer`` decides.
* ``principal``: principals of unauthenticated and TLS-authenticated connections.

Files live in ``<data dir>/__kwire/`` and are re-read when they change on disk, so
``kwire users`` and ``kwire acls`` may edit them while the broker runs.
"""

from .acls import AclBinding, AclFilter, AclOperation, AclStore, PatternType, PermissionType, ResourceType
from .authorizer import Authorizer
from .credentials import CredentialStore
from .principal import ANONYMOUS

__all__ = ["ANONYMOUS", "AclBinding", "AclFilter", "AclOperation", "AclStore", "Authorizer", "CredentialStore",
           "PatternType", "PermissionType", "ResourceType"]
