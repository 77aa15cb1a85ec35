"""The client quotas set by AlterClientQuotas (KIP-546), kept in ``<data dir>/__kwire/client-quotas.json``.

An entity is a set of (entity type, name) pairs: ``user``, ``client-id``, both, or ``ip`` alone; a
null name is that type's default entity.  Checks and answers follow Kafka's controller
(ClientQuotaControlManager for alterations, ClientQuotasImage for the description filters), with
its error messages.
"""

from __future__ import annotations

import ipaddress
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kwire.protocol.configs import ConfigType
from kwire.protocol.errors import InvalidRequestError, UnsupportedVersionError
from kwire.protocol.quotas import CLIENT_ID, ENTITY_TYPES, IP, QUOTA_KEYS, USER, QuotaKey, QuotaMatchType

from ..meta_document import MetaDocument
from ..topics import META_DIR

__all__ = ["ClientQuotaStore", "Entity", "QuotaRequestError", "entity_of", "format_entity"]

_FILE = "client-quotas.json"
_VERSION = 1
_WHAT_TO_DO = ("restore the file, or move it away to start without the client quotas set by AlterClientQuotas "
               "(clients are then not throttled)")

# An entity: its (type, name) pairs sorted by type; name None is the type's default.
Entity = tuple[tuple[str, str | None], ...]

_USER_CLIENT_KEYS = frozenset({QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE,
                               QuotaKey.CONTROLLER_MUTATION_RATE})
_IP_KEYS = frozenset({QuotaKey.CONNECTION_CREATION_RATE})
_INT_MAX = 2**31 - 1


class QuotaRequestError(Exception):
    """A request or alteration Kafka refuses: the error code and Kafka's message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> QuotaRequestError:
    return QuotaRequestError(InvalidRequestError.code, message)


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """An entity from (type, name) pairs; QuotaRequestError as Kafka's controller for an empty entity,
    an unknown or repeated type, an empty name, or ``ip`` mixed with the others (or not an address)."""
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise _invalid(f"Invalid empty client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise _invalid(f"Empty {kind} not supported")
        seen[kind] = name
    if not seen or (IP in seen and len(seen) > 1):
        raise _invalid("Invalid empty client quota entity")
    if IP in seen and seen[IP] is not None:
        try:
            ipaddress.ip_address(seen[IP])
        except ValueError:
            # Kafka also takes a host name it can resolve; kwire resolves none (no lookups on a request path).
            raise _invalid(f"{seen[IP]} is not a valid IP or resolvable host.") from None
    return tuple(sorted(seen.items()))


def format_entity(entity: Entity) -> str:
    """Kafka's way of naming an entity in messages: ``ClientQuotaEntity(entries={user=alice})``."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{k}={v}" for k, v in entity) + "})"


def _check_value(entity: Entity, key: str, value: float) -> None:
    allowed = _IP_KEYS if entity[0][0] == IP else _USER_CLIENT_KEYS
    if key not in allowed:
        raise _invalid(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0:
        # Kafka's quotas are upper bounds of a rate: a non-positive one could never be met (the
        # throttle time divides by it), so it is refused here rather than throttling forever.
        raise _invalid(f"Quota {key} must be a positive number, got {value}")
    if QUOTA_KEYS[key] in (ConfigType.LONG, ConfigType.INT):
        epsilon = 1e-6  # Kafka's tolerance for a whole number sent as a double
        if abs(round(value) - value) > epsilon:
            raise _invalid(f"Configuration {key} must be a {'Long' if QUOTA_KEYS[key] == ConfigType.LONG else 'Int'}"
                           " value")
        if QUOTA_KEYS[key] == ConfigType.INT and value > _INT_MAX:
            raise _invalid(f"Configuration {key} must be an Int value")


@dataclass(frozen=True, slots=True)
class Alteration:
    """One entity's changes: key -> new value, or None to remove the key."""

    entity: list[tuple[str, str | None]]
    ops: list[tuple[str, float | None]]


class ClientQuotaStore:
    """The client quotas of one data directory: entity -> {key: value}."""

    def __init__(self, data_dir: Path):
        self._doc = MetaDocument(Path(data_dir) / META_DIR / _FILE, _VERSION, "client quotas", _WHAT_TO_DO)
        self._path = self._doc.path
        self._lock = threading.Lock()
        self._quotas: dict[Entity, dict[str, float]] = self._load()
        self.version = 0  # bumped on every change, so that users of the quotas know to look again

    @property
    def path(self) -> Path:
        return self._path

    def _load(self) -> dict[Entity, dict[str, float]]:
        def parse(doc: dict) -> dict[Entity, dict[str, float]]:
            quotas: dict[Entity, dict[str, float]] = {}
            for item in doc["entities"]:
                entity = entity_of((str(k), None if v is None else str(v)) for k, v in item["entity"].items())
                values = {str(k): float(v) for k, v in item["quotas"].items()}
                for key, value in values.items():
                    _check_value(entity, key, value)
                quotas[entity] = values
            return quotas

        try:
            return self._doc.load(parse, {})
        except QuotaRequestError as exc:
            raise self._doc.unreadable(exc.message) from None

    def entries(self) -> dict[Entity, dict[str, float]]:
        """A copy of every entity's quotas."""
        return {e: dict(v) for e, v in self._quotas.items()}

    def get(self, entity: Entity) -> Mapping[str, float] | None:
        """The quotas of exactly this entity (read only), or None."""
        return self._quotas.get(entity)

    def alter(self, alterations: Iterable[Alteration], *, validate_only: bool = False) -> list[QuotaRequestError | None]:
        """Apply each entity's changes (all of one entity or none of them) and write the file once;
        per alteration None or the error that refused it.  ``validate_only``: check, change nothing."""
        with self._lock:
            quotas = {e: dict(v) for e, v in self._quotas.items()}
            results: list[QuotaRequestError | None] = []
            done: set[Entity] = set()
            for alteration in alterations:
                try:
                    entity = entity_of(alteration.entity)
                    if entity in done:
                        raise _invalid(f"Ignoring duplicate entity {format_entity(entity)}")
                    done.add(entity)
                    changes: dict[str, float | None] = {}
                    for key, value in alteration.ops:
                        if key in changes:
                            raise _invalid(f"Duplicate quota key {key} not updating quota for this entity "
                                           f"{format_entity(entity)}")
                        if value is not None:
                            _check_value(entity, key, value)
                        changes[key] = value
                except QuotaRequestError as exc:
                    results.append(exc)
                    continue
                values = quotas.setdefault(entity, {})
                for key, value in changes.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = float(value)
                if not values:
                    del quotas[entity]
                results.append(None)
            if not validate_only and quotas != self._quotas:
                self._write(quotas)
                self._quotas = quotas
                self.version += 1
            return results

    def _write(self, quotas: dict[Entity, dict[str, float]]) -> None:
        self._doc.save({"entities": [
            {"entity": dict(entity), "quotas": dict(sorted(values.items()))}
            for entity, values in sorted(quotas.items(), key=lambda item: [(k, v or "") for k, v in item[0]])]})

    def describe(self, components: Iterable[tuple[str, int, str | None]], strict: bool) -> list[tuple[Entity, dict]]:
        """The entities a DescribeClientQuotas filter matches, with their quotas (Kafka's
        ClientQuotasImage.describe): components are (entity type, match type, match string).
        QuotaRequestError for a filter Kafka refuses."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for kind, match_type, match in components:
            if not kind:
                raise _invalid("Invalid empty entity type.")
            if kind in exact or kind in specified:
                raise _invalid(f"Entity type {kind} cannot appear more than once in the filter.")
            if kind not in ENTITY_TYPES:
                raise QuotaRequestError(UnsupportedVersionError.code, f"Unsupported entity type {kind}")
            if match_type == QuotaMatchType.EXACT:
                if match is None:
                    raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[kind] = match
            elif match_type == QuotaMatchType.DEFAULT:
                if match is not None:
                    raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[kind] = None
            elif match_type == QuotaMatchType.SPECIFIED:
                if match is not None:
                    raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                specified.add(kind)
            else:
                raise _invalid(f"Unknown match type {match_type}")
        named = exact.keys() | specified
        if IP in named and (USER in named or CLIENT_ID in named):
            raise _invalid("Invalid entity filter component combination. IP filter component should not be used "
                           "with user or clientId filter component.")
        if not named and strict:
            return []
        out = []
        for entity, values in self._quotas.items():
            have = dict(entity)
            if any(kind not in have or have[kind] != name for kind, name in exact.items()):
                continue
            if any(kind not in have for kind in specified):
                continue
            if strict and len(have) != len(named):
                continue
            out.append((entity, dict(values)))
        return out
