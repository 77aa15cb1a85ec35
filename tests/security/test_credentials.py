"""The broker's credential store: salted hashes only, private, shared with `kwire users` while running."""

from __future__ import annotations

import os

import pytest

from kwire.broker.auth import CredentialStore
from kwire.security import ScramClient, ScramServer

PASSWORD = "correct horse battery staple"


def test_set_check_remove(tmp_path):
    store = CredentialStore(tmp_path)
    store.set_password("alice", PASSWORD)
    assert store.users() == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    assert store.check_password("alice", PASSWORD) and not store.check_password("alice", "nope")
    assert not store.check_password("bob", PASSWORD)
    # a SCRAM login against the stored credential
    server = ScramServer("SCRAM-SHA-256", lambda user: store.get(user, "SCRAM-SHA-256"))
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
    client.verify_server_final(server.process(client.final_message(server.process(client.first_message()))))
    store.set_password("alice", "new one", ["SCRAM-SHA-512"], iterations=8192)
    assert store.users() == {"alice": ["SCRAM-SHA-512"]} and store.iterations("alice") == {"SCRAM-SHA-512": 8192}
    assert store.check_password("alice", "new one")
    assert store.remove("alice") and not store.remove("alice")
    assert store.users() == {}


def test_nothing_in_clear_and_private(tmp_path):
    store = CredentialStore(tmp_path)
    store.set_password("alice", PASSWORD)
    raw = store.path.read_bytes()
    assert PASSWORD.encode() not in raw and b"horse" not in raw
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"horse" not in path.read_bytes(), path


def test_changes_by_another_writer_are_seen(tmp_path):
    broker_side, cli_side = CredentialStore(tmp_path), CredentialStore(tmp_path)
    assert broker_side.get("bob", "SCRAM-SHA-256") is None
    cli_side.set_password("bob", PASSWORD)
    assert broker_side.get("bob", "SCRAM-SHA-256") is not None
    cli_side.set_password("carol", PASSWORD)  # both writers' changes kept (read-modify-write under a lock)
    broker_side.set_password("dave", PASSWORD)
    assert sorted(CredentialStore(tmp_path).users()) == ["bob", "carol", "dave"]


@pytest.mark.parametrize("name", ["", "a\x00b", "tab\there", "x" * 256])
def test_bad_usernames(tmp_path, name):
    with pytest.raises(ValueError):
        CredentialStore(tmp_path).set_password(name, PASSWORD)


def test_change_user_deletes_and_stores_derived_credentials_in_one_write(tmp_path):
    from kwire.security.scram import make_credential

    store = CredentialStore(tmp_path)
    store.set_password("alice", PASSWORD)
    derived = make_credential("SCRAM-SHA-512", "other", iterations=8192)
    store.change_user("alice", delete=["SCRAM-SHA-256"], upsert=[derived])
    assert store.users() == {"alice": ["SCRAM-SHA-512"]} and store.iterations("alice") == {"SCRAM-SHA-512": 8192}
    assert CredentialStore(tmp_path).get("alice", "SCRAM-SHA-512") == derived  # written, not only cached
    store.change_user("alice", delete=["SCRAM-SHA-512"])
    assert store.users() == {}  # no user is kept without credentials
    with pytest.raises(ValueError, match="empty"):
        store.change_user("", upsert=[derived])
