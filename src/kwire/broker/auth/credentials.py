"""SCRAM credentials of the broker's users, in ``<data dir>/__kwire/credentials.json``.

Only what RFC 5802 has a server keep: salt, iteration count, StoredKey and ServerKey, per user and
mechanism. No password, nor anything a password can be recovered from short of guessing it. PLAIN
logins are checked against the same records (``verify_password``), so one ``kwire users add`` enables
a user for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path

from kwire.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential, make_credential, verify_password

from ..topics import META_DIR
from .files import JsonFile

__all__ = ["CREDENTIALS_FILE", "CredentialStore", "check_username"]

CREDENTIALS_FILE = "credentials.json"
_VERSION = 1
Users = dict[str, dict[str, ScramCredential]]


def check_username(name: str) -> None:
    if not name:
        raise ValueError("a username must not be empty")
    if len(name) > 255:
        raise ValueError("a username must be at most 255 characters")
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in name):
        raise ValueError("a username must not contain control characters")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _parse(doc: object) -> Users:
    if not isinstance(doc, dict) or doc.get("version") != _VERSION:
        raise ValueError(f"unknown credentials file version {doc.get('version') if isinstance(doc, dict) else doc!r}")
    users: Users = {}
    for name, mechanisms in doc["users"].items():
        users[name] = {}
        for mechanism, c in mechanisms.items():
            if mechanism not in MECHANISMS:
                raise ValueError(f"user {name!r}: unknown mechanism {mechanism!r}")
            users[name][mechanism] = ScramCredential(
                mechanism, base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                base64.b64decode(c["server_key"]), int(c["iterations"]))
    return users


def _dump(users: Users) -> object:
    return {"version": _VERSION, "users": {
        name: {m: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key),
                   "iterations": c.iterations} for m, c in sorted(mechanisms.items())}
        for name, mechanisms in sorted(users.items())}}


class CredentialStore:
    def __init__(self, data_dir: Path):
        self._file: JsonFile[Users] = JsonFile(Path(data_dir) / META_DIR / CREDENTIALS_FILE, _parse, _dump, {})

    @property
    def path(self) -> Path:
        return self._file.path

    def get(self, username: str, mechanism: str) -> ScramCredential | None:
        return self._file.current().get(username, {}).get(mechanism)

    def for_plain(self, username: str) -> ScramCredential | None:
        """A credential to check a PLAIN password against (the strongest the user has)."""
        mechanisms = self._file.current().get(username, {})
        return mechanisms.get("SCRAM-SHA-512") or mechanisms.get("SCRAM-SHA-256")

    def check_password(self, username: str, password: str) -> bool:
        credential = self.for_plain(username)
        return credential is not None and verify_password(credential, password)

    def users(self) -> dict[str, list[str]]:
        """username -> its mechanisms, sorted."""
        return {name: sorted(m) for name, m in sorted(self._file.current().items())}

    def iterations(self, username: str) -> dict[str, int]:
        return {m: c.iterations for m, c in self._file.current().get(username, {}).items()}

    def set_password(self, username: str, password: str, mechanisms: Iterable[str] = tuple(MECHANISMS), *,
                     iterations: int = MIN_ITERATIONS) -> None:
        """Create the user or replace its credentials (for exactly these mechanisms)."""
        check_username(username)
        mechanisms = list(dict.fromkeys(mechanisms))
        if not mechanisms:
            raise ValueError("give at least one mechanism")
        fresh = {m: make_credential(m, password, iterations=iterations) for m in mechanisms}

        def change(users: Users) -> Users:
            return {**users, username: fresh}

        self._file.update(change)

    def change_user(self, username: str, *, delete: Iterable[str] = (),
                    upsert: Iterable[ScramCredential] = ()) -> None:
        """Delete these mechanisms' credentials of ``username`` and store these (already derived:
        AlterUserScramCredentials carries salted passwords, not passwords) in one write; a user
        left without credentials is removed (the store keeps none without)."""
        check_username(username)
        deleted, upserts = set(delete), list(upsert)
        unknown = sorted({c.mechanism for c in upserts} - set(MECHANISMS))
        if unknown:
            raise ValueError(f"unknown SCRAM mechanism {', '.join(unknown)} (known: {', '.join(MECHANISMS)})")

        def change(users: Users) -> Users:
            mechanisms = {m: c for m, c in users.get(username, {}).items() if m not in deleted}
            mechanisms.update((c.mechanism, c) for c in upserts)
            rest = {n: m for n, m in users.items() if n != username}
            return {**rest, username: mechanisms} if mechanisms else rest

        self._file.update(change)

    def remove(self, username: str) -> bool:
        found = False

        def change(users: Users) -> Users:
            nonlocal found
            found = username in users
            return {n: m for n, m in users.items() if n != username}

        self._file.update(change)
        return found
