"""What ``Admin``'s client quota calls take and return, and the requests and answers behind them
(DescribeClientQuotas, AlterClientQuotas; KIP-546), kept apart from admin.py as admin_acls.py is.

An entity is a mapping of entity type (``user``, ``client-id``, ``ip``) to a name, None naming the
type's default entity: ``QuotaEntity.of(user="alice")``, ``QuotaEntity.of(user=None, client_id="app")``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kwire.protocol import messages
from kwire.protocol.quotas import CLIENT_ID, IP, USER, QuotaKey, QuotaMatchType

__all__ = [
    "ALTER_CLIENT_QUOTAS",
    "DESCRIBE_CLIENT_QUOTAS",
    "QuotaAlteration",
    "QuotaEntity",
    "QuotaFilter",
    "QuotaKey",
    "QuotaMatchType",
    "alter_request",
    "describe_request",
    "described_quotas",
]

DESCRIBE_CLIENT_QUOTAS = messages.DescribeClientQuotasRequest.API_KEY
ALTER_CLIENT_QUOTAS = messages.AlterClientQuotasRequest.API_KEY


class _Unset(enum.Enum):
    """The default of an entity keyword not given (None is given: the default entity)."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "<not given>"


_UNSET = _Unset.UNSET


@dataclass(frozen=True, order=True)
class QuotaEntity:
    """Who a quota is for: (entity type, name) pairs sorted by type, a None name being the default."""

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, mapping: Mapping[str, str | None] | None = None, *, user: str | None | _Unset = _UNSET,
           client_id: str | None | _Unset = _UNSET, ip: str | None | _Unset = _UNSET) -> QuotaEntity:
        """An entity from a mapping and/or the keywords (None: the default user / client id / ip)."""
        entries = dict(mapping or {})
        for kind, value in ((USER, user), (CLIENT_ID, client_id), (IP, ip)):
            if value is not _UNSET:
                entries[kind] = value
        return cls(tuple(sorted(entries.items())))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)

    def __str__(self) -> str:
        return ", ".join(f"{k}={'<default>' if v is None else v}" for k, v in self.entries) or "(empty entity)"


@dataclass(frozen=True)
class QuotaFilter:
    """One component of a DescribeClientQuotas filter: an entity type, matched EXACT (``match``),
    DEFAULT (the default entity) or SPECIFIED (any entity of that type)."""

    entity_type: str
    match_type: QuotaMatchType = QuotaMatchType.EXACT
    match: str | None = None

    @classmethod
    def exact(cls, entity_type: str, name: str) -> QuotaFilter:
        return cls(entity_type, QuotaMatchType.EXACT, name)

    @classmethod
    def default(cls, entity_type: str) -> QuotaFilter:
        return cls(entity_type, QuotaMatchType.DEFAULT)

    @classmethod
    def specified(cls, entity_type: str) -> QuotaFilter:
        return cls(entity_type, QuotaMatchType.SPECIFIED)


@dataclass(frozen=True)
class QuotaAlteration:
    """New quota values for one entity: key -> value, None removing the key."""

    entity: QuotaEntity
    changes: Mapping[str, float | None] = field(default_factory=dict)


def describe_request(filters: Iterable[QuotaFilter], strict: bool) -> messages.DescribeClientQuotasRequest:
    R = messages.DescribeClientQuotasRequest
    return R(strict=strict, components=[R.ComponentData(entity_type=f.entity_type, match_type=int(f.match_type),
                                                        match=f.match) for f in filters])


def described_quotas(response: messages.DescribeClientQuotasResponse) -> dict[QuotaEntity, dict[str, float]]:
    """The entities and values of a DescribeClientQuotas answer (whose error code the caller checked)."""
    return {QuotaEntity(tuple(sorted((d.entity_type, d.entity_name) for d in e.entity))):
            {v.key: v.value for v in e.values} for e in response.entries or ()}


def alter_request(alterations: Iterable[QuotaAlteration], validate_only: bool) -> messages.AlterClientQuotasRequest:
    R = messages.AlterClientQuotasRequest
    return R(validate_only=validate_only, entries=[R.EntryData(
        entity=[R.EntryData.EntityData(entity_type=k, entity_name=v) for k, v in a.entity.entries],
        ops=[R.EntryData.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
             for k, v in a.changes.items()]) for a in alterations])


def answered_entity(entry: messages.AlterClientQuotasResponse.EntryData) -> QuotaEntity:
    """The entity an AlterClientQuotas result names."""
    return QuotaEntity(tuple(sorted((d.entity_type, d.entity_name) for d in entry.entity)))
