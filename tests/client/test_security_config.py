"""Security settings of kwire's client: librdkafka's names (and Java's sasl.jaas.config), the rules
between them, the TLS context made from them, and the Spark source passing kafka.* ones through."""

from __future__ import annotations

import ssl

import pytest

from kwire.client.config import AdminConfig, ConfigError, ConsumerConfig, ProducerConfig
from kwire.client.security import ConnectionSecurity
from kwire.security.testing import make_ca, make_cert
from kwire.spark.options import parse_sink_options, parse_source_options

SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
         "sasl.password": "s3cret-pw"}
JAAS_SCRAM = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="alice" password="s3cret-pw";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = make_ca(d)
    return {"dir": d, "ca": ca, "client": make_cert(ca, d, "client", client=True),
            "locked": make_cert(ca, d, "locked", client=True, key_password="key-pw")}


# -- settings ------------------------------------------------------------------------------------------------
def test_scram_over_tls_settings():
    cfg = ProducerConfig.from_settings({**SCRAM, "security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512"})
    assert (cfg.security_protocol, cfg.sasl_mechanism, cfg.sasl_username) == ("SASL_SSL", "SCRAM-SHA-512", "alice")
    assert cfg.ssl_endpoint_identification_algorithm == "https"  # hostname verification on by default
    assert cfg.enable_ssl_certificate_verification is True


def test_passwords_are_never_shown():
    cfg = ConsumerConfig.from_settings({**SCRAM, "ssl.certificate.location": "c.pem", "ssl.key.password": "kpw"})
    assert "s3cret-pw" not in repr(cfg) and "kpw" not in repr(cfg)
    shown = cfg.to_dict()
    assert shown["sasl.password"] == shown["ssl.key.password"] == "[hidden]"
    assert ConsumerConfig.from_settings(cfg.to_dict(include_secrets=True)) == cfg


def test_librdkafkas_plural_mechanism_name_is_taken():
    cfg = AdminConfig.from_settings({**SCRAM, "sasl.mechanism": None, "sasl.mechanisms": "PLAIN"})
    assert cfg.sasl_mechanism == "PLAIN"


@pytest.mark.parametrize("jaas", [
    JAAS_SCRAM,
    'org.apache.kafka.common.security.scram.ScramLoginModule required\n  username=alice\n  password="s3cret-pw" ;',
])
def test_javas_jaas_config_gives_username_and_password(jaas):
    cfg = ProducerConfig.from_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                        "sasl.jaas.config": jaas})
    assert (cfg.sasl_username, cfg.sasl_password) == ("alice", "s3cret-pw")
    assert cfg.to_dict()["sasl.jaas.config"] == "[hidden]"
    assert ProducerConfig.from_settings(cfg.to_dict(include_secrets=True)) == cfg


def test_jaas_quoting():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
            'password="with \\"quote\\" and ; semicolon";')
    cfg = ProducerConfig.from_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                        "sasl.jaas.config": jaas})
    assert cfg.sasl_password == 'with "quote" and ; semicolon'


@pytest.mark.parametrize(("settings", "message"), [
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS_SCRAM}, "ScramLoginModule, which does not do sasl.mechanism=PLAIN"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "takes PlainLoginModule or ScramLoginModule"),
    ({"sasl.jaas.config": 'ScramLoginModule username="alice" password="s3cret-pw"'}, "is not a JAAS line"),
    ({"sasl.jaas.config": JAAS_SCRAM.replace("s3cret-pw", "other-pw")}, "sasl.password and the password in"),
    ({"sasl.jaas.config": JAAS_SCRAM.replace(' password="s3cret-pw"', ""), "sasl.password": None},
     "sasl.jaas.config has no password="),
])
def test_bad_jaas_configs_are_named_without_the_password(settings, message):
    with pytest.raises(ConfigError, match=message) as info:
        ProducerConfig.from_settings({**SCRAM, **settings})
    assert "s3cret-pw" not in str(info.value) and "other-pw" not in str(info.value)


@pytest.mark.parametrize(("settings", "message"), [
    ({"sasl.mechanism": None}, "^security.protocol=SASL_SSL needs sasl.mechanism"),
    ({"sasl.username": None}, "^security.protocol=SASL_SSL needs sasl.username"),
    ({"sasl.password": None}, "^security.protocol=SASL_SSL needs sasl.password"),
    ({"sasl.mechanism": "GSSAPI"}, "^sasl.mechanism=GSSAPI is not supported: kwire speaks PLAIN, SCRAM-SHA-256"),
    ({"sasl.mechanism": "SCRAM-SHA-1"}, "^sasl.mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"security.protocol": "PLAINTEXT"}, "^sasl.mechanism, sasl.username, sasl.password given, but "
                                         "security.protocol is PLAINTEXT: set security.protocol=SASL_SSL"),
    ({"security.protocol": "SASL_PLAINTEXT", "ssl.ca.location": "ca.pem"},
     "^ssl.ca.location given, but security.protocol is SASL_PLAINTEXT: set security.protocol=SSL or SASL_SSL"),
    ({"ssl.endpoint.identification.algorithm": "dns"}, "^ssl.endpoint.identification.algorithm must be one of"),
    ({"ssl.key.location": "k.pem"}, "^ssl.key.location needs ssl.certificate.location"),
    ({"ssl.truststore.location": "t.jks"}, "^ssl.truststore.location is not supported: kwire reads PEM files"),
    ({"ssl.keystore.location": "k.jks"}, "^ssl.keystore.location is not supported: kwire reads PEM files"),
    ({"sasl.oauthbearer.token.endpoint.url": "x"}, "^sasl.oauthbearer.token.endpoint.url is not supported: OAUTH"),
    ({"ssl.ca.locaton": "ca.pem"}, "did you mean 'ssl.ca.location'"),
])
def test_security_mistakes_are_named(settings, message):
    with pytest.raises(ConfigError, match=message) as info:
        ConsumerConfig.from_settings({**SCRAM, **settings})
    assert "s3cret-pw" not in str(info.value)


@pytest.mark.parametrize(("value", "expected"), [("https", "https"), ("HTTPS", "https"), ("none", "none"),
                                                 ("", "none")])  # "": Java's way of turning it off
def test_hostname_verification_setting(value, expected):
    cfg = AdminConfig.from_settings({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": value})
    assert cfg.ssl_endpoint_identification_algorithm == expected


# -- the TLS context made from them --------------------------------------------------------------------------
def test_tls_context_verifies_the_broker_and_its_name(pki):
    security = ConnectionSecurity.from_config(AdminConfig.from_settings(
        {"security.protocol": "SSL", "ssl.ca.location": pki["ca"].cert}))
    assert security.tls and security.sasl is None
    context = security.ssl_context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    off = ConnectionSecurity.from_config(AdminConfig.from_settings(
        {"security.protocol": "SSL", "ssl.ca.location": pki["ca"].cert,
         "ssl.endpoint.identification.algorithm": "none"}))
    assert off.ssl_context.verify_mode == ssl.CERT_REQUIRED and not off.ssl_context.check_hostname


def test_sasl_login_from_settings():
    security = ConnectionSecurity.from_config(ProducerConfig.from_settings({**SCRAM, "security.protocol": "SASL_PLAINTEXT"}))
    assert not security.tls
    assert (security.sasl.mechanism, security.sasl.username, security.sasl.password) == \
        ("SCRAM-SHA-512", "alice", "s3cret-pw")
    assert "s3cret-pw" not in repr(security)


def test_client_certificate_with_encrypted_key(pki):
    locked = pki["locked"]
    good = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"].cert,
            "ssl.certificate.location": locked.cert, "ssl.key.location": locked.key, "ssl.key.password": "key-pw"}
    assert ConnectionSecurity.from_config(AdminConfig.from_settings(good)).tls
    for wrong in ({"ssl.key.password": "nope"}, {"ssl.key.password": None}):  # None: no prompt on the terminal
        with pytest.raises(ConfigError, match="^ssl.certificate.location / ssl.key.location: cannot load the client "
                                              "certificate and key from .*ssl.key.password"):
            ConnectionSecurity.from_config(AdminConfig.from_settings({**good, **wrong}))


@pytest.mark.parametrize(("key", "what"), [("ssl.ca.location", "ca"), ("ssl.certificate.location", "cert")])
def test_missing_files_are_named_when_the_client_is_made(pki, key, what, tmp_path):
    settings = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"].cert, key: str(tmp_path / "nope.pem")}
    with pytest.raises(ConfigError, match=f"^{key}: .*nope.pem does not exist"):
        ConnectionSecurity.from_config(AdminConfig.from_settings(settings))


def test_a_ca_file_that_is_not_pem(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="^ssl.ca.location: .*ca.pem: cannot load CA certificates"):
        ConnectionSecurity.from_config(AdminConfig.from_settings({"security.protocol": "SSL",
                                                                  "ssl.ca.location": str(bad)}))


def test_turning_verification_off_is_librdkafkas_switch(pki):
    security = ConnectionSecurity.from_config(AdminConfig.from_settings(
        {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}))
    assert security.ssl_context.verify_mode == ssl.CERT_NONE and not security.ssl_context.check_hostname


# -- the Spark source passes kafka.* security options through -------------------------------------------------
SPARK = {"kafka.bootstrap.servers": "broker:9093", "kafka.security.protocol": "SASL_SSL",
         "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": JAAS_SCRAM,
         "kafka.ssl.ca.location": "/etc/kafka/ca.pem"}


def _spark(options):
    # Spark lower-cases option keys before the source sees them.
    return {k.lower(): v for k, v in options.items()}


def test_spark_source_passes_security_options_to_its_clients():
    options = parse_source_options(_spark({**SPARK, "subscribe": "t"}))
    for settings, config_class in ((options.consumer_settings(), ConsumerConfig),
                                   (options.admin_settings(), AdminConfig)):
        cfg = config_class.from_settings(settings)
        assert (cfg.security_protocol, cfg.sasl_mechanism, cfg.sasl_username, cfg.sasl_password,
                cfg.ssl_ca_location) == ("SASL_SSL", "SCRAM-SHA-512", "alice", "s3cret-pw", "/etc/kafka/ca.pem")
    assert "s3cret-pw" not in repr(options)


def test_spark_sink_passes_security_options_to_its_producer():
    given = {k: v for k, v in SPARK.items() if k not in ("kafka.sasl.jaas.config", "kafka.sasl.mechanism")}
    options = parse_sink_options(_spark({**given, "kafka.sasl.username": "alice", "kafka.sasl.password": "s3cret-pw",
                                         "kafka.sasl.mechanisms": "PLAIN"}))  # librdkafka's spelling
    cfg = ProducerConfig.from_settings(options.producer_settings())
    assert (cfg.sasl_mechanism, cfg.sasl_username, cfg.sasl_password) == ("PLAIN", "alice", "s3cret-pw")
    assert "s3cret-pw" not in repr(options)


def test_spark_refuses_bad_security_options_at_planning():
    with pytest.raises(ConfigError, match="^a kafka.\\* option is not a valid setting of kwire's consumer: "
                                          "ssl.truststore.location is not supported"):
        parse_source_options(_spark({**SPARK, "subscribe": "t", "kafka.ssl.truststore.location": "/t.jks"}))
