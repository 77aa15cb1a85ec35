"""The broker's ACL bindings, in ``<data dir>/__kwire/acls.json`` (the model is ``kwire.security.acl``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kwire.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_RESOURCES,
    WILDCARD,
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    check_binding,
)

from ..topics import META_DIR
from .files import JsonFile

__all__ = ["ACLS_FILE", "CLUSTER_NAME", "SUPPORTED_RESOURCES", "WILDCARD", "AclBinding", "AclFilter", "AclOperation",
           "AclStore", "PatternType", "PermissionType", "ResourceType", "check_binding"]

ACLS_FILE = "acls.json"
_VERSION = 1


def _parse(doc: object) -> tuple[AclBinding, ...]:
    if not isinstance(doc, dict) or doc.get("version") != _VERSION:
        raise ValueError("unknown ACL file version")
    out = []
    for a in doc["acls"]:
        out.append(AclBinding(ResourceType[a["resource_type"]], a["name"], PatternType[a["pattern"]],
                              a["principal"], a["host"], AclOperation[a["operation"]],
                              PermissionType[a["permission"]]))
    return tuple(sorted(set(out)))


def _dump(acls: tuple[AclBinding, ...]) -> object:
    return {"version": _VERSION, "acls": [
        {"resource_type": b.resource_type.name, "name": b.name, "pattern": b.pattern.name, "principal": b.principal,
         "host": b.host, "operation": b.operation.name, "permission": b.permission.name} for b in acls]}


class AclStore:
    def __init__(self, data_dir: Path):
        self._file: JsonFile[tuple[AclBinding, ...]] = JsonFile(Path(data_dir) / META_DIR / ACLS_FILE, _parse,
                                                                 _dump, ())

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def generation(self) -> int:
        return self._file.generation

    def bindings(self) -> tuple[AclBinding, ...]:
        return self._file.current()

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if f.matches(b)]

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Store bindings (checked first: all or nothing); adding one already there is no change."""
        new = list(bindings)
        for b in new:
            check_binding(b)
        self._file.update(lambda acls: tuple(sorted(set(acls) | set(new))))

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete the bindings each filter matches; per filter, what it deleted."""
        removed: list[list[AclBinding]] = []

        def change(acls: tuple[AclBinding, ...]) -> tuple[AclBinding, ...]:
            removed.clear()
            removed.extend([b for b in acls if f.matches(b)] for f in filters)
            gone = {b for found in removed for b in found}
            return tuple(b for b in acls if b not in gone)

        self._file.update(change)
        return removed
