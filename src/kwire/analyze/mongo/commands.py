"""What an exchange takes from command documents: the names in a request's command, and the errors
and small facts of a command reply."""

from __future__ import annotations

from typing import Any

from ..exchange import Exchange
from .errors import _error_name

_HELLO_COMMANDS = frozenset(("hello", "isMaster", "ismaster"))
# Commands whose first value is a string that names something other than a collection.
_NOT_A_COLLECTION = frozenset((
    "getLog", "createUser", "updateUser", "dropUser", "usersInfo", "createRole", "updateRole", "dropRole",
    "rolesInfo", "grantRolesToUser", "revokeRolesFromUser", "grantRolesToRole", "revokeRolesFromRole",
    "grantPrivilegesToRole", "revokePrivilegesFromRole", "setFeatureCompatibilityVersion", "configureFailPoint",
    "getParameter", "setParameter", "saslStart", "authenticate", "explain",
))
_SEQUENCE_FIELDS = ("documents", "updates", "deletes")  # a write command's batch, inline or as a kind 1 section


def _failed(ok) -> bool:
    return isinstance(ok, (int, float)) and ok == 0  # ok is 1 / 1.0 / true, or 0 / 0.0 / false


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reply_facts(ex: Exchange, doc) -> None:
    """Errors and small facts of a command reply document."""
    if not isinstance(doc, dict):
        return
    # (code, name, message) of each error: the command's own first, then each write's, then the
    # write concern's.
    errors: list[tuple[Any, str, Any]] = []
    if _failed(doc.get("ok")) or "$err" in doc:  # '$err': a legacy query failure
        message = doc.get("errmsg", doc.get("$err"))
        errors.append((doc.get("code"), _error_name(doc.get("code"), doc.get("codeName"), message), message))
    write_errors = doc.get("writeErrors")
    if isinstance(write_errors, list):
        for we in write_errors:
            if isinstance(we, dict):
                errors.append((we.get("code"), _error_name(we.get("code"), we.get("codeName"), we.get("errmsg")),
                               we.get("errmsg")))
    wce = doc.get("writeConcernError")
    if isinstance(wce, dict):
        name = _error_name(wce.get("code"), wce.get("codeName"), wce.get("errmsg") or "writeConcernError")
        errors.append((wce.get("code"), name, wce.get("errmsg")))
    if errors:
        code, ex.error, message = errors[0]
        ex.error_code = _int(code) if _int(code) else -1  # -1: an error without a code
        ex.errors.update(name for _code, name, _message in errors)
        if isinstance(message, str):
            ex.details["errmsg"] = message[:500]
    for key in ("n", "nModified"):
        value = _int(doc.get(key))
        if value is not None:
            ex.details[key] = value
    cursor = doc.get("cursor")
    if isinstance(cursor, dict):
        batch = cursor.get("firstBatch", cursor.get("nextBatch"))
        if isinstance(batch, list):
            ex.details["nReturned"] = len(batch)
        cursor_id = _int(cursor.get("id"))
        if cursor_id is not None:  # the new cursor of a find / aggregate (a getMore names its own)
            ex.details.setdefault("cursor_id", cursor_id)


def _app_name(client) -> str | None:
    """The application name in a handshake's client metadata."""
    if isinstance(client, dict):
        app = client.get("application")
        if isinstance(app, dict) and isinstance(app.get("name"), str):
            return app["name"]
    return None


def _split_namespace(namespace: str | None) -> tuple[str | None, str | None]:
    if not namespace:
        return None, None
    db, dot, coll = namespace.partition(".")
    return db, (coll if dot else None)


def _unwrap_query(query: dict) -> dict:
    """A legacy command query may be wrapped with read preferences: {'$query': {...}, ...}."""
    first = next(iter(query), None)
    if first in ("$query", "query") and isinstance(query[first], dict):
        return query[first]
    return query
