"""Listeners: several at once (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), named ones with a protocol map,
advertised addresses, TOML and command-line configuration. Metadata and FindCoordinator answer each
client with the listener it connected to."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from kwire.broker.config import ConfigError, load_config
from kwire.protocol import messages
from tests.security.helpers import PASSWORD, RawConnection, make_pki, secure_broker, tls_context

from . import clients as c

ALL = ("SASL_SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _connect(broker, pki, listener: str) -> RawConnection:
    conn = RawConnection(broker.bootstrap_for(listener), tls=tls_context(pki) if "SSL" in listener else None)
    if "SASL" in listener:
        conn.login("SCRAM-SHA-256", "alice", PASSWORD)
    return conn


def test_each_client_is_told_its_own_listener(tmp_path, pki):
    with secure_broker(tmp_path / "data", pki, ALL) as b:
        b.add_user("alice", PASSWORD)
        ports = {name: listener.port for name, listener in b.broker.listeners.items()}
        assert len(set(ports.values())) == 4
        for name in ports:
            with _connect(b, pki, name) as conn:
                meta = conn.call(messages.MetadataRequest(topics=None), 12)
                assert [(x.host, x.port) for x in meta.brokers] == [("127.0.0.1", ports[name])]
                coordinator = conn.call(messages.FindCoordinatorRequest(key="g", key_type=0), 3)
                assert (coordinator.error_code, coordinator.port) == (0, ports[name])
                cluster = conn.call(messages.DescribeClusterRequest(include_cluster_authorized_operations=False), 0)
                assert cluster.brokers[0].port == ports[name]
        with _connect(b, pki, "PLAINTEXT") as conn:
            R = messages.DescribeConfigsRequest
            configs = conn.call(R(resources=[R.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                                         configuration_keys=None)],
                                  include_synonyms=False), 1)
            entries = {e.name: e.value for e in configs.results[0].configs}
            assert set(entries["advertised.listeners"].split(",")) == {
                f"{name}://127.0.0.1:{port}" for name, port in ports.items()}
            assert "SASL_SSL:SASL_SSL" in entries["listener.security.protocol.map"]


def test_named_listeners_with_protocol_map_and_advertised_host(tmp_path, pki):
    with secure_broker(tmp_path / "data", pki, ["CLIENT://127.0.0.1:0", "INTERNAL://127.0.0.1:0"],
                       listener_security_protocol_map=["CLIENT:SASL_SSL", "INTERNAL:PLAINTEXT"],
                       advertised_listeners=["CLIENT://kafka.example.com:9093"]) as b:
        b.add_user("alice", PASSWORD)
        assert {n: li.protocol for n, li in b.broker.listeners.items()} == {"CLIENT": "SASL_SSL",
                                                                              "INTERNAL": "PLAINTEXT"}
        assert b.bootstrap_for("CLIENT") == "kafka.example.com:9093"
        port = b.broker.listeners["CLIENT"].port
        with RawConnection(f"127.0.0.1:{port}", tls=tls_context(pki)) as conn:
            conn.login("SCRAM-SHA-512", "alice", PASSWORD)
            meta = conn.call(messages.MetadataRequest(topics=None), 12)
            assert [(x.host, x.port) for x in meta.brokers] == [("kafka.example.com", 9093)]
        with RawConnection(b.bootstrap_for("INTERNAL")) as conn:
            meta = conn.call(messages.MetadataRequest(topics=None), 12)
            assert meta.brokers[0].port == b.broker.listeners["INTERNAL"].port


@pytest.mark.parametrize("settings,message", [
    ({"listeners": ["CLIENT://127.0.0.1:0"]}, "CLIENT is not a security protocol"),
    ({"listeners": ["SSL://127.0.0.1:0"]}, "needs ssl_certificate_location"),
    ({"listeners": ["PLAINTEXT://127.0.0.1"]}, "must look like NAME://host:port"),
    ({"listeners": ["PLAINTEXT://127.0.0.1:9092", "SASL_PLAINTEXT://127.0.0.1:9092"]}, "is used by another"),
    ({"listeners": ["A://:0"], "listener_security_protocol_map": ["A:TLS"]}, "PROTOCOL one of"),
    ({"listeners": ["PLAINTEXT://:0"], "advertised_listeners": ["OTHER://h:1"]}, "names no listener"),
    ({"sasl_enabled_mechanisms": ["GSSAPI"]}, "GSSAPI not supported"),
    ({"ssl_client_auth": "required"}, "needs ssl_ca_location"),
    ({"super_users": ["admin"]}, "must be a principal like User:admin"),
])
def test_bad_security_settings_are_named(settings, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, **settings)


def _start(*args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "kwire.cli.main", "broker", "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"broker did not start: {proc.stderr.read()}")
    return proc, json.loads(line)


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def _kwire(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kwire.cli.main", *args], input=input, capture_output=True,
                          text=True, timeout=60)


def test_toml_listeners_and_kcat_over_sasl_ssl(tmp_path, pki):
    data = tmp_path / "data"
    added = _kwire("users", "add", "alice", "--password-stdin", "--data-dir", str(data), input=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    toml = tmp_path / "broker.toml"
    toml.write_text(f'''data_dir = "{data}"
listeners = ["SECURE://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"]
listener_security_protocol_map = ["SECURE:SASL_SSL"]
ssl_certificate_location = "{pki.server.cert}"
ssl_key_location = "{pki.server.key}"
sasl_enabled_mechanisms = ["SCRAM-SHA-512"]
''')
    proc, info = _start("--config", str(toml))
    try:
        assert set(info["listeners"]) == {"SECURE", "PLAINTEXT"} and info["bootstrap"] == info["listeners"]["SECURE"]
        kcat = ["-b", info["listeners"]["SECURE"], "-X", "security.protocol=SASL_SSL", "-X",
                "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}",
                "-X", f"ssl.ca.location={pki.ca.cert}"]
        out = c.kcat(*kcat, "-P", "-t", "toml", input=b"one\ntwo\n")
        assert out.returncode == 0, out.stderr.decode()
        out = c.kcat(*kcat, "-C", "-t", "toml", "-e", "-f", "%s\n")
        assert out.stdout.decode().split() == ["one", "two"], out.stderr.decode()
        # PLAIN is not enabled there: refused with the list of what is
        out = c.kcat(*kcat, "-X", "sasl.mechanism=PLAIN", "-L", "-m", "3")
        assert out.returncode != 0 and b"SCRAM-SHA-512" in out.stderr, out.stderr
    finally:
        err = _stop(proc)
    assert "listener SECURE (SASL_SSL)" in err and "asked for SASL mechanism 'PLAIN'" in err
    assert PASSWORD not in err


def test_command_line_listeners_and_refusals(tmp_path, pki):
    bad = _kwire("broker", "--listener", "SSL://127.0.0.1:0", "--data-dir", str(tmp_path / "d"))
    assert bad.returncode == 2 and "needs ssl_certificate_location" in bad.stderr
    bad = _kwire("broker", "--listener", "PLAINTEXT://127.0.0.1:0", "--port", "0", "--data-dir", str(tmp_path / "d"))
    assert bad.returncode == 2 and "--host and --port" in bad.stderr
    proc, info = _start("--listener", "SSL://127.0.0.1:0", "--listener", "PLAINTEXT://127.0.0.1:0",
                        "--ssl-certificate-location", pki.server.cert, "--ssl-key-location", pki.server.key,
                        "--data-dir", str(tmp_path / "data"))
    try:
        out = c.kcat("-b", info["listeners"]["SSL"], "-X", "security.protocol=SSL", "-X",
                     f"ssl.ca.location={pki.ca.cert}", "-L", "-J")
        assert out.returncode == 0, out.stderr.decode()
        assert json.loads(out.stdout)["brokers"][0]["name"] == info["listeners"]["SSL"]
        out = c.kcat("-b", info["listeners"]["PLAINTEXT"], "-L", "-J")
        assert json.loads(out.stdout)["brokers"][0]["name"] == info["listeners"]["PLAINTEXT"]
    finally:
        _stop(proc)
