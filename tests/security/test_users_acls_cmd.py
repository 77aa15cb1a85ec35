"""``kwire users`` and ``kwire acls``: offline on a data dir, text and JSON output, help."""

from __future__ import annotations

import io
import json

import pytest

from kwire.broker.auth import CredentialStore
from kwire.cli.main import main

PASSWORD = "correct horse battery staple"


def run(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_users_add_list_remove(tmp_path, capsys, monkeypatch):
    d = str(tmp_path / "data")
    code, out, _ = run(capsys, "users", "add", "alice", "--password-stdin", "--data-dir", d, stdin=PASSWORD + "\n",
                       monkeypatch=monkeypatch)
    assert code == 0 and "added user alice (SCRAM-SHA-256, SCRAM-SHA-512)" in out
    monkeypatch.setenv("KWIRE_USER_PASSWORD", "bobs password")
    code, out, _ = run(capsys, "users", "add", "bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
                       "--data-dir", d)
    assert code == 0
    code, out, _ = run(capsys, "users", "list", "--json", "--data-dir", d)
    assert json.loads(out) == {"users": [
        {"username": "alice", "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
         "iterations": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}},
        {"username": "bob", "mechanisms": ["SCRAM-SHA-512"], "iterations": {"SCRAM-SHA-512": 8192}}]}
    code, out, _ = run(capsys, "users", "list", "--data-dir", d)
    assert out.splitlines()[0].split() == ["USER", "MECHANISMS", "ITERATIONS"] and "alice" in out
    store = CredentialStore(tmp_path / "data")
    assert store.check_password("alice", PASSWORD) and store.check_password("bob", "bobs password")
    # the data dir holds no password, in any file
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert PASSWORD.encode() not in content and b"bobs password" not in content, path
    code, out, err = run(capsys, "users", "remove", "alice", "nobody", "--data-dir", d)
    assert code == 1 and "removed user alice" in out and "no such user: nobody" in err
    assert list(store.users()) == ["bob"]


def test_users_refusals_and_config_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KWIRE_USER_PASSWORD", raising=False)
    code, _, err = run(capsys, "users", "add", "alice", "--data-dir", str(tmp_path), stdin="",
                       monkeypatch=monkeypatch)
    assert code == 2 and "no password" in err
    code, _, err = run(capsys, "users", "add", "alice", "--password", "p", "--iterations", "10", "--data-dir",
                       str(tmp_path))
    assert code == 2 and "iterations" in err
    toml = tmp_path / "broker.toml"
    toml.write_text(f'data_dir = "{tmp_path / "from-config"}"\n')
    code, out, _ = run(capsys, "users", "add", "carol", "--password", "pw", "--config", str(toml))
    assert code == 0 and str(tmp_path / "from-config") in out


def test_acls_add_list_remove(tmp_path, capsys):
    d = str(tmp_path / "data")
    code, out, _ = run(capsys, "acls", "add", "--principal", "User:alice", "--operation", "read", "--operation",
                       "describe", "--topic", "app-", "--prefixed", "--group", "app-g", "--data-dir", d)
    assert code == 0 and out.count("added: ALLOW User:alice") == 4
    code, out, _ = run(capsys, "acls", "add", "--deny", "--principal", "User:mallory", "--operation", "all",
                       "--cluster", "--data-dir", d)
    assert code == 0 and "DENY User:mallory ALL on CLUSTER 'kafka-cluster'" in out
    code, out, _ = run(capsys, "acls", "list", "--json", "--topic", "app-orders", "--resource-pattern-type", "match",
                       "--data-dir", d)
    found = json.loads(out)["acls"]
    assert {(a["operation"], a["pattern_type"], a["name"]) for a in found} == {("READ", "PREFIXED", "app-"),
                                                                               ("DESCRIBE", "PREFIXED", "app-")}
    code, out, _ = run(capsys, "acls", "list", "--data-dir", d)
    assert out.splitlines()[0].split() == ["PERMISSION", "PRINCIPAL", "OPERATION", "RESOURCE", "NAME", "PATTERN",
                                           "HOST"]
    assert len(out.splitlines()) == 2 + 5
    code, out, _ = run(capsys, "acls", "remove", "--principal", "User:alice", "--group", "app-g", "--data-dir", d)
    assert code == 0 and out.count("removed:") == 2
    code, _, err = run(capsys, "acls", "remove", "--data-dir", d)  # no filter: refuses to remove everything
    assert code == 2 and "name what to remove" in err
    code, _, err = run(capsys, "acls", "add", "--principal", "alice", "--operation", "read", "--topic", "t",
                       "--data-dir", d)
    assert code == 2 and "User:name" in err
    code, out, _ = run(capsys, "acls", "list", "--json", "--data-dir", d)
    assert len(json.loads(out)["acls"]) == 3


@pytest.mark.parametrize("argv", [["users", "--help"], ["users", "add", "--help"], ["acls", "--help"],
                                  ["acls", "add", "--help"], ["acls", "list", "--help"]])
def test_help(capsys, argv):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    assert "usage: kwire" in capsys.readouterr().out
