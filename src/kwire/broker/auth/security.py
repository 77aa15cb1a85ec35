"""The broker's security state: credentials, ACLs and their authorizer, SASL settings."""

from __future__ import annotations

from pathlib import Path

from .acls import AclStore
from .authorizer import Authorizer
from .credentials import CredentialStore
from .sasl import FailedLogins

__all__ = ["BrokerSecurity"]


class BrokerSecurity:
    def __init__(self, config, data_dir: Path):
        self.credentials = CredentialStore(data_dir)
        self.acls = AclStore(data_dir)
        self.mechanisms = tuple(config.sasl_enabled_mechanisms)
        self.failures = FailedLogins(config.failed_authentication_delay_ms, config.failed_authentication_max_delay_ms)
        self.authorizer: Authorizer | None = None
        if config.authorizer:
            self.authorizer = Authorizer(self.acls, config.super_users,
                                         allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found)
