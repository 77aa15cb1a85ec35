"""``kwire acls`` online: through a broker with an authorizer, logged in with the SASL flags and the
password from $KWIRE_SASL_PASSWORD; the same lines, table and JSON as offline on the broker's data
dir; $KWIRE_BOOTSTRAP selects online unless --data-dir is given; contradicting flags refused; the
broker's refusals (CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED) one line on stderr."""

from __future__ import annotations

import json

import pytest

from kwire.broker import EmbeddedBroker
from kwire.cli.client_options import SECURITY_OPTIONS
from kwire.cli.main import main

PASSWORD = "cli-acl-Secret-5-"  # + the user's name


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """SASL logins, ACLs enforced, admin a super user, alice an ordinary user."""
    b = EmbeddedBroker(tmp_path_factory.mktemp("cli-acls") / "data", listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
                       authorizer=True, super_users=["User:admin"], failed_authentication_delay_ms=0)
    for user in ("admin", "alice"):
        b.add_user(user, PASSWORD + user, mechanisms=["SCRAM-SHA-256"])
    with b:
        yield b


@pytest.fixture
def env(monkeypatch):
    """No KWIRE_* variable from the outside; the tests set the ones they mean."""
    for _, variable, _ in SECURITY_OPTIONS.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("KWIRE_BOOTSTRAP", raising=False)
    return monkeypatch


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sasl(broker: EmbeddedBroker, user: str) -> list[str]:
    """Everything but the password, which comes from $KWIRE_SASL_PASSWORD."""
    return ["--bootstrap", broker.bootstrap, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism",
            "SCRAM-SHA-256", "--sasl-username", user, "--timeout", "20"]


def one_line_error(code: int, err: str, status: int = 1) -> str:
    assert code == status, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kwire: error: "), err
    assert PASSWORD not in err
    return lines[0]


def test_add_list_remove_online_as_offline(broker, env, capsys):
    env.setenv("KWIRE_SASL_PASSWORD", PASSWORD + "admin")
    online = sasl(broker, "admin")
    offline = ["--data-dir", str(broker.data_dir)]
    code, out, err = run(capsys, "acls", "add", "--principal", "User:alice", "--operation", "write", "--operation",
                         "describe", "--topic", "cli-", "--prefixed", "--group", "cli-readers", *online)
    assert code == 0, err
    assert out.splitlines() == [
        "added: ALLOW User:alice WRITE on TOPIC 'cli-' (prefixed) from host *",
        "added: ALLOW User:alice DESCRIBE on TOPIC 'cli-' (prefixed) from host *",
        "added: ALLOW User:alice WRITE on GROUP 'cli-readers' (prefixed) from host *",
        "added: ALLOW User:alice DESCRIBE on GROUP 'cli-readers' (prefixed) from host *"]

    for query in (["--json", "--topic", "cli-orders", "--resource-pattern-type", "match"], ["--principal", "User:alice"],
                  ["--json"], []):
        code, got, err = run(capsys, "acls", "list", *query, *online)
        assert code == 0, err
        code, expected, err = run(capsys, "acls", "list", *query, *offline)  # the broker's own file
        assert code == 0, err
        assert got == expected, query
    code, out, _ = run(capsys, "acls", "list", "--json", "--topic", "cli-orders", "--resource-pattern-type", "match",
                       *online)
    assert sorted((a["operation"], a["pattern_type"], a["name"]) for a in json.loads(out)["acls"]) == [
        ("DESCRIBE", "PREFIXED", "cli-"), ("WRITE", "PREFIXED", "cli-")]
    code, out, _ = run(capsys, "acls", "list", "--principal", "User:alice", *online)
    assert out.splitlines()[0].split() == ["PERMISSION", "PRINCIPAL", "OPERATION", "RESOURCE", "NAME", "PATTERN",
                                           "HOST"]
    assert len(out.splitlines()) == 2 + 4

    code, out, err = run(capsys, "acls", "remove", "--principal", "User:alice", "--group", "cli-readers", *online)
    assert code == 0, err
    assert out.splitlines() == ["removed: ALLOW User:alice WRITE on GROUP 'cli-readers' (prefixed) from host *",
                                "removed: ALLOW User:alice DESCRIBE on GROUP 'cli-readers' (prefixed) from host *"]
    code, out, _ = run(capsys, "acls", "remove", "--principal", "User:alice", "--group", "cli-readers", *online)
    assert (code, out) == (0, "no ACL matched\n")
    code, out, _ = run(capsys, "acls", "remove", "--principal", "User:alice", *online)
    assert code == 0 and out.count("removed:") == 2
    code, out, _ = run(capsys, "acls", "list", "--json", *offline)
    assert json.loads(out) == {"acls": []}


def test_environment_bootstrap_goes_online_unless_a_data_dir_is_given(broker, env, capsys, tmp_path):
    for variable, value in (("KWIRE_BOOTSTRAP", broker.bootstrap), ("KWIRE_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
                            ("KWIRE_SASL_MECHANISM", "SCRAM-SHA-256"), ("KWIRE_SASL_USERNAME", "admin"),
                            ("KWIRE_SASL_PASSWORD", PASSWORD + "admin")):
        env.setenv(variable, value)
    code, out, err = run(capsys, "acls", "add", "--principal", "User:alice", "--operation", "read", "--topic",
                         "env-topic")
    assert code == 0 and out == "added: ALLOW User:alice READ on TOPIC 'env-topic' from host *\n", err
    code, out, _ = run(capsys, "acls", "list", "--json", "--topic", "env-topic", "--data-dir", str(broker.data_dir))
    assert [a["name"] for a in json.loads(out)["acls"]] == ["env-topic"]  # it went to the broker
    # An explicit data dir wins over the ambient variable: this one is empty.
    code, out, _ = run(capsys, "acls", "list", "--json", "--data-dir", str(tmp_path / "elsewhere"))
    assert (code, json.loads(out)) == (0, {"acls": []})
    code, out, err = run(capsys, "acls", "remove", "--topic", "env-topic")
    assert code == 0 and out == "removed: ALLOW User:alice READ on TOPIC 'env-topic' from host *\n", err


def test_contradicting_flags_are_refused(env, capsys, tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    code, _, err = run(capsys, "acls", "list", "--bootstrap", "127.0.0.1:1", *data)
    assert "--bootstrap works through a running broker, --data-dir on its data directory offline: give one or " \
           "the other" in one_line_error(code, err, 2)
    code, _, err = run(capsys, "acls", "list", "--sasl-username", "admin", "-X", "client.id=me")
    assert "-X, --sasl-username need a broker: give --bootstrap (or set $KWIRE_BOOTSTRAP)" in \
        one_line_error(code, err, 2)
    env.setenv("KWIRE_BOOTSTRAP", "127.0.0.1:1")  # ambient: the explicit --data-dir is what counts
    code, _, err = run(capsys, "acls", "add", "--principal", "User:a", "--operation", "read", "--topic", "t",
                       "--timeout", "5", *data)
    assert "--timeout only apply online (with --bootstrap), not with --data-dir" in one_line_error(code, err, 2)
    assert not (tmp_path / "data").exists()  # refused before touching anything


def test_the_brokers_refusals_are_one_line(broker, env, capsys, tmp_path):
    env.setenv("KWIRE_SASL_PASSWORD", PASSWORD + "alice")
    add = ["acls", "add", "--principal", "User:alice", "--operation", "all", "--topic", "mine"]
    code, _, err = run(capsys, *add, *sasl(broker, "alice"))
    assert "CLUSTER_AUTHORIZATION_FAILED" in one_line_error(code, err)
    code, _, err = run(capsys, "acls", "list", *sasl(broker, "alice"))
    assert "User:alice may not DESCRIBE the cluster's ACLs" in one_line_error(code, err)
    env.setenv("KWIRE_SASL_PASSWORD", "wrong-password")
    code, _, err = run(capsys, "acls", "list", *sasl(broker, "admin"))
    assert "authentication failed" in one_line_error(code, err).lower() and "wrong-password" not in err
    with EmbeddedBroker(tmp_path / "plain") as plain:
        code, _, err = run(capsys, *add, "--bootstrap", plain.bootstrap)
        assert "SECURITY_DISABLED" in one_line_error(code, err)
