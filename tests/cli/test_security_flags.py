"""The CLI's security settings: dedicated flags, -X, --config FILE and KWIRE_* variables, in that
order of precedence, for every command that talks to a cluster; then ``kwire topics``, ``produce``
and ``consume`` logging in with SCRAM-SHA-512 over TLS to kwire's broker for real, and one line on
stderr when they cannot."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.auth.credentials import CredentialStore
from kwire.cli.client_options import SECURITY_OPTIONS, client_settings
from kwire.cli.main import build_parser
from kwire.security.testing import make_ca, make_cert

KWIRE = [sys.executable, "-m", "kwire.cli.main"]
PASSWORD = "cli-Secret-7"

CLIENT_COMMANDS = [["produce", "t"], ["consume", "t"], ["topics", "list"], ["topics", "create", "t"],
                   ["topics", "describe", "t"], ["metadata"], ["groups", "list"], ["lag", "g"]]


@pytest.fixture
def no_env(monkeypatch):
    for _, env, _ in SECURITY_OPTIONS.values():
        monkeypatch.delenv(env, raising=False)
    monkeypatch.delenv("KWIRE_BOOTSTRAP", raising=False)
    return monkeypatch


def settings_of(*argv: str) -> dict:
    return client_settings(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=lambda c: " ".join(c))
def test_every_client_command_takes_the_security_flags(no_env, command):
    got = settings_of(*command, "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
                      "--sasl-username", "alice", "--sasl-password", "pw", "--ssl-ca-location", "ca.pem",
                      "--ssl-certificate-location", "c.pem", "--ssl-key-location", "c.key")
    assert {k: got[k] for k in SECURITY_OPTIONS if k in got} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": "pw", "ssl.ca.location": "ca.pem", "ssl.certificate.location": "c.pem",
        "ssl.key.location": "c.key"}


def test_environment_variables(no_env):
    values = {"KWIRE_SECURITY_PROTOCOL": "SASL_SSL", "KWIRE_SASL_MECHANISM": "PLAIN",
              "KWIRE_SASL_USERNAME": "bob", "KWIRE_SASL_PASSWORD": "env-pw", "KWIRE_SSL_CA_LOCATION": "ca.pem",
              "KWIRE_SSL_CERTIFICATE_LOCATION": "c.pem", "KWIRE_SSL_KEY_LOCATION": "c.key",
              "KWIRE_SSL_KEY_PASSWORD": "kpw", "KWIRE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "none"}
    for name, value in values.items():
        no_env.setenv(name, value)
    got = settings_of("topics", "list")
    assert {k: got[k] for k in SECURITY_OPTIONS} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "bob",
        "sasl.password": "env-pw", "ssl.ca.location": "ca.pem", "ssl.certificate.location": "c.pem",
        "ssl.key.location": "c.key", "ssl.key.password": "kpw", "ssl.endpoint.identification.algorithm": "none"}


def test_variables_the_protocol_does_not_use_are_ignored(no_env):
    no_env.setenv("KWIRE_SASL_USERNAME", "bob")
    no_env.setenv("KWIRE_SSL_CA_LOCATION", "ca.pem")
    got = settings_of("topics", "list")  # PLAINTEXT: exported for another cluster
    assert "sasl.username" not in got and "ssl.ca.location" not in got
    got = settings_of("topics", "list", "--security-protocol", "SASL_PLAINTEXT")
    assert got["sasl.username"] == "bob" and "ssl.ca.location" not in got
    got = settings_of("topics", "list", "-X", "ssl.ca.location=mine.pem")  # given on purpose: kept (and refused)
    assert got["ssl.ca.location"] == "mine.pem"


def test_an_empty_variable_counts_as_unset(no_env):
    no_env.setenv("KWIRE_SASL_USERNAME", "")
    assert "sasl.username" not in settings_of("topics", "list")


def test_precedence_flag_over_x_over_file_over_environment(no_env, tmp_path):
    conf = tmp_path / "client.properties"
    conf.write_text("sasl.username=from-file\nsasl.mechanism=SCRAM-SHA-256\nsasl.password=file-pw\n")
    no_env.setenv("KWIRE_SASL_USERNAME", "from-env")
    no_env.setenv("KWIRE_SASL_MECHANISM", "PLAIN")
    no_env.setenv("KWIRE_SASL_PASSWORD", "env-pw")
    no_env.setenv("KWIRE_SECURITY_PROTOCOL", "SASL_SSL")
    base = ["topics", "list", "--config", str(conf)]
    got = settings_of(*base)
    assert (got["sasl.username"], got["sasl.mechanism"], got["sasl.password"], got["security.protocol"]) == \
        ("from-file", "SCRAM-SHA-256", "file-pw", "SASL_SSL")  # the file over the environment
    got = settings_of(*base, "-X", "sasl.username=from-x")
    assert got["sasl.username"] == "from-x"  # -X over the file
    got = settings_of(*base, "-X", "sasl.username=from-x", "--sasl-username", "from-flag")
    assert got["sasl.username"] == "from-flag"  # the flag over -X
    assert got["sasl.password"] == "file-pw"


def test_help_documents_the_variables_and_the_precedence(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["produce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for _, env, _ in SECURITY_OPTIONS.values():
        assert env in text
    assert "Each setting comes from its flag, else -X KEY=VALUE, else --config FILE, else the environment" in text
    assert "--sasl-password PASSWORD the SASL password (discouraged" in text


# -- for real, against kwire's broker ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A broker with a SASL_SSL and an SSL listener, the user alice, and the CA the client trusts."""
    d = tmp_path_factory.mktemp("cli-security")
    ca = make_ca(str(d))
    cert = make_cert(ca, str(d), "broker")
    data = d / "data"
    data.mkdir()
    CredentialStore(data).set_password("alice", PASSWORD)
    with EmbeddedBroker(data, listeners=("SASL_SSL://127.0.0.1:0", "SSL://127.0.0.1:0"), ssl_certificate_location=cert.cert,
                        ssl_key_location=cert.key, failed_authentication_delay_ms=10,
                        failed_authentication_max_delay_ms=40) as broker:
        yield {"sasl": broker.broker.bootstrap_for("SASL_SSL"), "ssl": broker.broker.bootstrap_for("SSL"),
               "ca": ca.cert, "other_ca": make_ca(str(d / "other")).cert, "dir": d}


def kwire(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KWIRE_")}
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=60, input=stdin,
                          env={**clean, **(env or {})})


def ok(*args: str, env: dict | None = None) -> str:
    result = kwire(*args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kwire: error: "), result.stderr
    assert PASSWORD not in result.stderr and "wrong-password" not in result.stderr
    return lines[0]


def test_topics_produce_consume_with_flags_env_and_file(secure):
    flags = ["-b", secure["sasl"], "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
             "--sasl-username", "alice", "--sasl-password", PASSWORD, "--ssl-ca-location", secure["ca"]]
    env = {"KWIRE_BOOTSTRAP": secure["sasl"], "KWIRE_SECURITY_PROTOCOL": "SASL_SSL",
           "KWIRE_SASL_MECHANISM": "SCRAM-SHA-512", "KWIRE_SASL_USERNAME": "alice", "KWIRE_SASL_PASSWORD": PASSWORD,
           "KWIRE_SSL_CA_LOCATION": secure["ca"]}
    conf = secure["dir"] / "client.properties"
    conf.write_text(f"bootstrap.servers={secure['sasl']}\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.username=alice\nsasl.password={PASSWORD}\nssl.ca.location={secure['ca']}\n")

    ok("topics", "create", "cli-secure", "-p", "1", *flags)                     # flags
    assert "cli-secure" in ok("topics", "list", env=env)                        # environment
    ok("produce", "cli-secure", "one", "two", "three", env=env)
    ok("produce", "cli-secure", "four", "--config", str(conf))                  # properties file
    out = ok("consume", "cli-secure", "--from-beginning", "-e", "--config", str(conf))
    assert out.split() == ["one", "two", "three", "four"]
    out = ok("consume", "cli-secure", "-g", "cli-group", "--from-beginning", "-c", "4", *flags)
    assert out.split() == ["one", "two", "three", "four"]


def test_wrong_password_is_one_line_at_once(secure):
    result = kwire("topics", "list", "-b", secure["sasl"], "--timeout", "60",
                   env={"KWIRE_SECURITY_PROTOCOL": "SASL_SSL", "KWIRE_SASL_MECHANISM": "SCRAM-SHA-512",
                        "KWIRE_SASL_USERNAME": "alice", "KWIRE_SASL_PASSWORD": "wrong-password",
                        "KWIRE_SSL_CA_LOCATION": secure["ca"]})
    assert one_line_error(result).startswith("kwire: error: authentication failed for user alice with "
                                             "SCRAM-SHA-512: Authentication failed")


def test_untrusted_broker_certificate(secure):
    result = kwire("produce", "t", "x", "-b", secure["ssl"], "--security-protocol", "SSL",
                   "--ssl-ca-location", secure["other_ca"], "--timeout", "60")
    line = one_line_error(result)
    assert f"TLS handshake with {secure['ssl']} failed: the broker's certificate is not trusted" in line


def test_plain_tcp_to_the_tls_port(secure):
    line = one_line_error(kwire("topics", "list", "-b", secure["ssl"], "--timeout", "60"))
    assert f"{secure['ssl']} closed the connection without answering: is it a TLS listener?" in line


def test_bad_security_settings_are_named(secure):
    line = one_line_error(kwire("topics", "list", "-b", secure["sasl"], "--sasl-username", "alice"))
    assert line == ("kwire: error: sasl.username given, but security.protocol is PLAINTEXT: set "
                    "security.protocol=SASL_SSL or SASL_PLAINTEXT to log in with SASL")
    line = one_line_error(kwire("topics", "list", "-b", secure["ssl"], "--security-protocol", "SSL",
                                "--ssl-ca-location", str(secure["dir"] / "missing.pem")))
    assert line.endswith("missing.pem does not exist") and "ssl.ca.location" in line
