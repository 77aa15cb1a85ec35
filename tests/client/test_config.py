"""Client settings: Kafka's names and defaults, text values, and every mistake named."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest

from kwire.client.config import (
    AdminConfig,
    CommonConfig,
    ConfigError,
    ConsumerConfig,
    ProducerConfig,
    load_properties,
    parse_host_port,
    parse_properties,
    secret,
)
from kwire.settings import ConfigError as SettingsConfigError
from kwire.settings import SettingType, coerce, value_type

# Kafka 4.x's documented defaults (Java client), and where kwire deliberately differs.
COMMON_DEFAULTS = {
    "bootstrap.servers": ["localhost:9092"],
    "client.id": "kwire",                        # Java: "" (then "producer-1"...)
    "request.timeout.ms": 30000,
    "metadata.max.age.ms": 300000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 10000,
    "connections.max.idle.ms": 540000,
    "max.in.flight.requests.per.connection": 5,
    "security.protocol": "PLAINTEXT",
    "sasl.mechanism": None,                      # Java and librdkafka: GSSAPI, which kwire lacks
    "sasl.username": None,
    "sasl.password": None,
    "sasl.jaas.config": None,
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "enable.ssl.certificate.verification": True,  # librdkafka's
    "client.rack": "",
}
PRODUCER_DEFAULTS = {
    **COMMON_DEFAULTS,
    "acks": -1,
    "linger.ms": 5,
    "batch.size": 16384,
    "batch.num.messages": None,  # librdkafka's bound on records per batch; Java has none
    "compression.type": "none",
    "enable.idempotence": True,
    "retries": 2147483647,
    "delivery.timeout.ms": 120000,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "max.request.size": 1048576,
    "partitioner": "murmur2_random",
    "partitioner.ignore.keys": False,
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
}
CONSUMER_DEFAULTS = {
    **COMMON_DEFAULTS,
    "group.id": None,
    "group.instance.id": None,
    "group.protocol": "classic",        # Kafka 4's default; "consumer" is KIP-848
    "group.remote.assignor": None,      # the broker's default assignor
    "auto.offset.reset": "latest",
    "enable.auto.commit": False,                  # true, but Java turns it off without a group.id
    "auto.commit.interval.ms": 5000,
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "max.poll.interval.ms": 300000,
    "max.poll.records": 500,
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 1048576,
    "partition.assignment.strategy": ["range", "cooperative-sticky"],
    "isolation.level": "read_uncommitted",
    "check.crcs": True,
    "allow.auto.create.topics": True,
    "exclude.internal.topics": True,
}
ADMIN_DEFAULTS = {**COMMON_DEFAULTS, "connections.max.idle.ms": 300000}  # AdminClientConfig's own default
ROLES = {ProducerConfig: PRODUCER_DEFAULTS, ConsumerConfig: CONSUMER_DEFAULTS, AdminConfig: ADMIN_DEFAULTS}

INT32_SETTINGS = ["request.timeout.ms", "batch.size", "retries", "max.poll.records", "fetch.max.bytes",
                  "session.timeout.ms", "max.in.flight.requests.per.connection"]
BOOL_SETTINGS = {"enable.idempotence": ProducerConfig, "partitioner.ignore.keys": ProducerConfig,
                 "check.crcs": ConsumerConfig, "enable.auto.commit": ConsumerConfig, "allow.auto.create.topics": ConsumerConfig,
                 "exclude.internal.topics": ConsumerConfig}
CHOICES = {"compression.type": (ProducerConfig, "brotli"), "partitioner": (ProducerConfig, "fnv1a"),
           "auto.offset.reset": (ConsumerConfig, "oldest"), "isolation.level": (ConsumerConfig, "committed")}


def role_of(name: str) -> type[CommonConfig]:
    for cls in (ProducerConfig, ConsumerConfig):
        if name in ROLES[cls] and name not in COMMON_DEFAULTS:
            return cls
    return AdminConfig


def int_settings() -> list[str]:
    return sorted(name for defaults in ROLES.values() for name, v in defaults.items()
                  if isinstance(v, int) and not isinstance(v, bool) and name != "acks")


# -- defaults -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", ROLES)
def test_every_setting_has_kafkas_default(cls):
    assert cls().to_dict() == ROLES[cls]
    assert cls.from_settings().to_dict() == ROLES[cls]


def test_enable_auto_commit_defaults_to_true_with_a_group():
    assert ConsumerConfig(group_id="g").enable_auto_commit is True


# -- names and values -------------------------------------------------------------------------------
def test_dotted_names_keywords_and_both_mixed_keywords_winning():
    conf = {"bootstrap.servers": "a:1", "linger.ms": 1, "client.id": "from-conf"}
    cfg = ProducerConfig.from_settings(conf, linger_ms=7, batch_size=10)
    assert (cfg.bootstrap_servers, cfg.linger_ms, cfg.batch_size, cfg.client_id) == (("a:1",), 7, 10, "from-conf")
    assert ProducerConfig.from_settings({"linger_ms": 3}).linger_ms == 3
    assert ProducerConfig.from_settings(**{"linger.ms": 4}).linger_ms == 4


def test_text_values_are_parsed_as_kafka_does():
    text = {"bootstrap.servers": " k1:9092 , [::1]:9093,k3:1", "acks": "all", "linger.ms": " 1000 ",
            "enable.idempotence": "TRUE", "partitioner.ignore.keys": "false", "retries": "+3",
            "max.in.flight.requests.per.connection": "1", "request.timeout.ms": "5000"}
    cfg = ProducerConfig.from_settings(text)
    assert cfg.bootstrap_servers == ("k1:9092", "[::1]:9093", "k3:1")
    assert cfg.bootstrap_addresses == [("k1", 9092), ("::1", 9093), ("k3", 1)]
    assert (cfg.acks, cfg.linger_ms, cfg.enable_idempotence, cfg.partitioner_ignore_keys, cfg.retries) == (
        -1, 1000, True, False, 3)
    consumer = ConsumerConfig.from_settings({"group.id": "g", "partition.assignment.strategy": "roundrobin,range",
                                            "check.crcs": "False", "fetch.max.wait.ms": "0"})
    assert consumer.partition_assignment_strategy == ("roundrobin", "range")
    assert (consumer.check_crcs, consumer.fetch_max_wait_ms) == (False, 0)


@pytest.mark.parametrize("given,acks", [("all", -1), ("ALL", -1), ("-1", -1), (-1, -1), ("0", 0), (0, 0),
                                        ("1", 1), (1, 1)])
def test_acks_values(given, acks):
    assert ProducerConfig.from_settings({"acks": given, "enable.idempotence": False}).acks == acks


def test_security_protocol_is_case_insensitive():
    assert AdminConfig.from_settings({"security.protocol": "plaintext"}).security_protocol == "PLAINTEXT"


def test_java_assignor_class_names_are_understood():
    cfg = ConsumerConfig.from_settings({"partition.assignment.strategy":
                                        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"})
    assert cfg.partition_assignment_strategy == ("cooperative-sticky",)


@pytest.mark.parametrize("strategy,protocol", [
    ("range", "eager"), ("roundrobin,range", "eager"), ("cooperative-sticky", "cooperative"),
    ("range,cooperative-sticky", "eager"),  # Java's default mix: the upgrade path, rebalancing eagerly
])
def test_rebalance_protocol_follows_java(strategy, protocol):
    assert ConsumerConfig(partition_assignment_strategy=strategy).rebalance_protocol == protocol


def test_direct_construction_checks_and_parses_too():
    assert ProducerConfig(linger_ms="9", acks="all").linger_ms == 9
    with pytest.raises(ConfigError, match="linger.ms must be >= 0"):
        ProducerConfig(linger_ms=-1)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProducerConfig().linger_ms = 1  # type: ignore[misc]


# -- every mistake names the setting ----------------------------------------------------------------
@pytest.mark.parametrize("name", int_settings())
def test_integer_settings_refuse_text_floats_booleans_and_negatives(name):
    cls = role_of(name)
    for bad in ("x", "1.5", "1_000", "", 2.0, True):
        with pytest.raises(ConfigError, match=f"^{name} must be an integer, got "):
            cls.from_settings({name: bad})
    with pytest.raises(ConfigError, match=f"^{name} must be >= "):
        cls.from_settings({name: -1})


@pytest.mark.parametrize("name", INT32_SETTINGS)
def test_java_int_settings_stop_at_int32(name):
    with pytest.raises(ConfigError, match=f"^{name} must be <= 2147483647, got 2147483648"):
        role_of(name).from_settings({name: 2**31})


@pytest.mark.parametrize("name,cls", BOOL_SETTINGS.items())
def test_boolean_settings_refuse_anything_else(name, cls):
    for bad in ("yes", "1", 1, "", "truee"):
        with pytest.raises(ConfigError, match=f"^{name} must be true or false, got "):
            cls.from_settings({name: bad})


@pytest.mark.parametrize("name,case", CHOICES.items())
def test_choice_settings_list_their_choices(name, case):
    cls, bad = case
    with pytest.raises(ConfigError, match=f"^{name} must be one of .*, got '{bad}'"):
        cls.from_settings({name: bad})


@pytest.mark.parametrize("name", ["client.id", "client.rack", "compression.type"])
def test_string_settings_refuse_other_types(name):
    with pytest.raises(ConfigError, match=f"^{name} must be a string, got 5"):
        ProducerConfig.from_settings({name: 5})


@pytest.mark.parametrize("value,message", [
    (2, "acks must be all, -1, 0 or 1, got 2"),
    ("some", "acks must be all, -1, 0 or 1, got 'some'"),
    (True, "acks must be all, -1, 0 or 1, got True"),
])
def test_bad_acks(value, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        ProducerConfig.from_settings({"acks": value})


@pytest.mark.parametrize("servers,message", [
    ("localhost", "'localhost' has no port"),
    ("h:0", "the port must be a number from 1 to 65535"),
    ("h:65536", "the port must be a number from 1 to 65535"),
    ("h:http", "the port must be a number"),
    ("::1:9092", r"an IPv6 address goes in brackets, as \[::1\]:9092"),
    ("[::1:9092", "has no ']'"),
    ("[nope]:9092", "'nope' is not an IPv6 address"),
    ("[::1]", "has no port"),
    ("bad host:1", "'bad host' is not a host name"),
    (":9092", "'' is not a host name"),
    ("", "must name at least one host:port"),
    (["a:1", 5], "must be a list of strings"),
    (9092, "must be a list of strings"),
])
def test_bad_bootstrap_servers(servers, message):
    with pytest.raises(ConfigError, match=f"^bootstrap.servers.*{message}"):
        AdminConfig.from_settings({"bootstrap.servers": servers})


def test_parse_host_port():
    assert parse_host_port("kafka-1.example.com:9092") == ("kafka-1.example.com", 9092)
    assert parse_host_port(" 10.0.0.1:19092 ") == ("10.0.0.1", 19092)
    assert parse_host_port("[fe80::1%eth0]:9092") == ("fe80::1%eth0", 9092)


@pytest.mark.parametrize("value,message", [
    ("sticky", "partition.assignment.strategy must be one of range, roundrobin, cooperative-sticky, got 'sticky'"),
    ("", "partition.assignment.strategy must name at least one assignor"),
    ("range,range", "partition.assignment.strategy names an assignor twice"),
])
def test_bad_assignment_strategy(value, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        ConsumerConfig.from_settings({"partition.assignment.strategy": value})


@pytest.mark.parametrize("conf,message", [
    ({"group.id": ""}, "group.id must not be empty"),
    ({"group.instance.id": "", "group.id": "g"}, "group.instance.id must not be empty"),
    ({"enable.auto.commit": True}, "enable.auto.commit=true needs a group.id"),
    ({"heartbeat.interval.ms": 45000}, r"heartbeat.interval.ms \(45000\) must be lower than session.timeout.ms \(45000\)"),
    ({"session.timeout.ms": 0}, "session.timeout.ms must be >= 1, got 0"),
])
def test_consumer_rules(conf, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        ConsumerConfig.from_settings(conf)


@pytest.mark.parametrize("cls,key,message", [
    (ProducerConfig, "lingr.ms", "unknown producer setting 'lingr.ms' (did you mean 'linger.ms'?)"),
    (ProducerConfig, "linger_msec", "unknown producer setting 'linger_msec' (did you mean 'linger_ms'?)"),
    (ConsumerConfig, "group.idd", "unknown consumer setting 'group.idd' (did you mean 'group.id'?)"),
    (AdminConfig, "bootstrap.server", "unknown admin setting 'bootstrap.server' (did you mean 'bootstrap.servers'?)"),
    (AdminConfig, "zzz", "unknown admin setting 'zzz'"),
    (CommonConfig, "quux.ms", "unknown client setting 'quux.ms'"),
])
def test_unknown_settings_suggest_the_closest_name(cls, key, message):
    with pytest.raises(ConfigError) as err:
        cls.from_settings({key: 1})
    assert str(err.value) == message


def test_unknown_keyword_is_named_as_written():
    with pytest.raises(ConfigError, match=r"^unknown producer setting 'lingr_ms' \(did you mean 'linger_ms'\?\)$"):
        ProducerConfig.from_settings(lingr_ms=5)


def test_setting_names_must_be_strings():
    with pytest.raises(ConfigError, match="setting names are strings, got 5"):
        ProducerConfig.from_settings({5: 1})


@pytest.mark.parametrize("cls,key,owner", [
    (ProducerConfig, "group.id", "consumer"),
    (ProducerConfig, "max.poll.records", "consumer"),
    (ConsumerConfig, "acks", "producer"),
    (ConsumerConfig, "linger_ms", "producer"),
    (AdminConfig, "partitioner", "producer"),
    (AdminConfig, "isolation.level", "consumer"),
    (ProducerConfig, "key.deserializer", "consumer"),   # known, unsupported, and not a producer's
    (ConsumerConfig, "transactional.id", "producer"),
])
def test_a_setting_of_another_role_names_its_role(cls, key, owner):
    article = "an" if cls is AdminConfig else "a"
    with pytest.raises(ConfigError, match=f"^{key.replace('_', '.')} is a {owner} setting; {article} {cls.ROLE} does not take it$"):
        cls.from_settings({key: "x"})


@pytest.mark.parametrize("cls,key", [
    (ProducerConfig, "key.serializer"), (ProducerConfig, "partitioner.class"),
    (ConsumerConfig, "value.deserializer"),
    (AdminConfig, "ssl.truststore.location"), (ConsumerConfig, "ssl.keystore.location"),
    (ProducerConfig, "sasl.kerberos.service.name"), (AdminConfig, "default.api.timeout.ms"),
    (AdminConfig, "send.buffer.bytes"), (ProducerConfig, "metric.reporters"),
])
def test_recognised_but_unsupported_settings(cls, key):
    with pytest.raises(ConfigError, match=f"^{key} is not supported: "):
        cls.from_settings({key: "x"})


@pytest.mark.parametrize("protocol", ["SSL", "sasl_ssl", "SASL_PLAINTEXT"])
def test_secure_protocols_are_supported(protocol):
    sasl = {"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"} if "sasl" in protocol.lower() else {}
    assert ProducerConfig.from_settings({"security.protocol": protocol, **sasl}).security_protocol == protocol.upper()


def test_unknown_security_protocol():
    with pytest.raises(ConfigError, match="^security.protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
                                          "SASL_SSL, got 'TLS'"):
        ProducerConfig.from_settings({"security.protocol": "tls"})


def test_config_error_is_the_one_of_kwire_settings():
    assert ConfigError is SettingsConfigError and issubclass(ConfigError, ValueError)


# -- idempotence and the settings Java derives ---------------------------------------------------------------
@pytest.mark.parametrize("conflict", [{"acks": 1}, {"acks": "0"}, {"retries": 0},
                                      {"max.in.flight.requests.per.connection": 6}])
def test_idempotence_quietly_off_when_not_asked_for_and_ruled_out(conflict):
    assert ProducerConfig.from_settings(conflict).enable_idempotence is False


@pytest.mark.parametrize("conflict,message", [
    ({"acks": 1}, r"acks=all \(got 1\)"),
    ({"retries": "0"}, r"retries > 0 \(got 0\)"),
    ({"max.in.flight.requests.per.connection": 6}, r"max.in.flight.requests.per.connection <= 5 \(got 6\)"),
])
def test_idempotence_asked_for_and_ruled_out_is_an_error(conflict, message):
    with pytest.raises(ConfigError, match=f"^enable.idempotence=true needs {message}"):
        ProducerConfig.from_settings({"enable.idempotence": "true", **conflict})


def test_idempotence_explicit_settings_that_agree():
    assert ProducerConfig.from_settings({"enable.idempotence": False}).enable_idempotence is False
    assert ProducerConfig.from_settings({"enable.idempotence": True, "acks": "all"}).enable_idempotence is True
    assert ProducerConfig.from_settings({"enable.idempotence": False, "acks": 0, "retries": 0}).acks == 0
    assert ProducerConfig(max_in_flight_requests_per_connection=5).enable_idempotence is True


def test_delivery_timeout_follows_linger_and_request_timeout_as_in_java():
    assert ProducerConfig(linger_ms=100_000).delivery_timeout_ms == 130_000  # not given: raised to the sum
    assert ProducerConfig(delivery_timeout_ms=30_005).delivery_timeout_ms == 30_005
    with pytest.raises(ConfigError, match=r"^delivery.timeout.ms must be >= linger.ms \+ request.timeout.ms "
                                          r"\(30005\), got 30004$"):
        ProducerConfig(delivery_timeout_ms=30_004)


def test_with_derives_again_what_was_not_given():
    derived = ProducerConfig()
    assert derived.with_(acks=1).enable_idempotence is False
    assert derived.with_(linger_ms=200_000).delivery_timeout_ms == 230_000
    with pytest.raises(ConfigError, match="enable.idempotence=true needs"):
        ProducerConfig(enable_idempotence=True).with_(acks=1)
    assert ConsumerConfig().with_(group_id="g").enable_auto_commit is True
    assert ConsumerConfig(enable_auto_commit=False, group_id="g").with_(client_id="x").enable_auto_commit is False


# -- to_dict ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,conf,expected", [
    (ProducerConfig, {"bootstrap.servers": "a:1,b:2", "acks": "1", "linger.ms": "50", "compression.type": "zstd",
                      "partitioner": "consistent_random", "client.id": "p", "client.rack": "r1"},
     {"bootstrap.servers": ["a:1", "b:2"], "acks": 1, "linger.ms": 50, "compression.type": "zstd",
      "partitioner": "consistent_random", "client.id": "p", "client.rack": "r1", "enable.idempotence": False}),
    (ConsumerConfig, {"group.id": "g", "group.instance.id": "i-1", "partition.assignment.strategy": "cooperative-sticky",
                      "isolation.level": "read_committed", "enable.auto.commit": "false", "auto.offset.reset": "none"},
     {"group.id": "g", "group.instance.id": "i-1", "partition.assignment.strategy": ["cooperative-sticky"],
      "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "none"}),
    (AdminConfig, {"request.timeout.ms": "1000", "retry.backoff.max.ms": "5000"},
     {"request.timeout.ms": 1000, "retry.backoff.max.ms": 5000}),
])
def test_to_dict_gives_kafka_names_and_round_trips(cls, conf, expected):
    cfg = cls.from_settings(conf)
    out = cfg.to_dict()
    assert out == {**ROLES[cls], **expected}
    assert cls.from_settings(out) == cfg
    assert cls.from_settings(out).to_dict() == out


@dataclass(frozen=True)
class _WithPassword(CommonConfig):
    ROLE: ClassVar[str] = "test"

    vault_password: str | None = secret()


def test_secrets_are_never_shown():
    cfg = _WithPassword.from_settings({"vault.password": "hunter2"})
    assert cfg.vault_password == "hunter2"
    assert cfg.to_dict()["vault.password"] == "[hidden]"
    assert "hunter2" not in repr(cfg)
    assert _WithPassword.from_settings(cfg.to_dict(include_secrets=True)) == cfg
    assert _WithPassword().to_dict()["vault.password"] is None  # nothing to hide


# -- .properties files -----------------------------------------------------------------------------------
GOOD_PROPERTIES = """\
# a comment
! another comment
   # indented comment

bootstrap.servers=k1:9092,\\
                  k2:9092
client.id : my-app
acks    all
linger.ms=\\
  25
group.id = team\\u00e9\\tA\\=B
client.rack=rack\\\x20
ssl.note = value with # not a comment
empty=
"""


def test_properties_file_as_java_reads_it(tmp_path):
    path = tmp_path / "client.properties"
    path.write_bytes(GOOD_PROPERTIES.replace("\n", "\r\n").encode())
    props = load_properties(path)
    assert props == {"bootstrap.servers": "k1:9092,k2:9092", "client.id": "my-app", "acks": "all",
                     "linger.ms": "25", "group.id": "team\u00e9\tA=B", "client.rack": "rack ",
                     "ssl.note": "value with # not a comment", "empty": ""}
    assert list(props)[:3] == ["bootstrap.servers", "client.id", "acks"]  # file order


def test_properties_file_configures_a_client(tmp_path):
    path = tmp_path / "producer.properties"
    path.write_text("bootstrap.servers=k1:9092\nacks=1\nlinger.ms=20\nenable.idempotence=false\n")
    cfg = ProducerConfig.from_settings(load_properties(path), linger_ms=30)
    assert (cfg.bootstrap_servers, cfg.acks, cfg.linger_ms, cfg.enable_idempotence) == (("k1:9092",), 1, 30, False)


@pytest.mark.parametrize("text,line,message", [
    ("a=1\njust-a-word\n", 2, "expected key=value, got 'just-a-word'"),
    ("a=1\n\n=value\n", 3, "no setting name before the value"),
    ("a=1\n# c\na = 2\n", 3, "a is already set on line 1"),
    ("x=\\u12G4\n", 1, r"bad \\u escape"),
    ("a=1\nb=2\\\n  3\nc\n", 4, "expected key=value"),  # line numbers count physical lines
])
def test_bad_properties_lines_name_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "bad.properties"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}:{line}: {message}"):
        load_properties(path)


def test_properties_file_that_is_missing_or_not_text(tmp_path):
    with pytest.raises(ConfigError, match="nope.properties does not exist"):
        load_properties(tmp_path / "nope.properties")
    binary = tmp_path / "binary.properties"
    binary.write_bytes(b"a=\xff\xfe\n")
    with pytest.raises(ConfigError, match="binary.properties"):
        load_properties(binary)


def test_continuation_at_end_of_text_and_escaped_backslashes():
    assert parse_properties("a=1\\") == {"a": "1"}
    assert parse_properties("path=C:\\\\dir\\\\\nb=2") == {"path": "C:\\dir\\", "b": "2"}


# -- the shared settings parser -----------------------------------------------------------------------
def test_value_types_come_from_annotations():
    assert value_type(int | None) == SettingType(int, optional=True)
    assert value_type(tuple[str, ...]) == SettingType(tuple)
    assert value_type(list[str]) == SettingType(tuple)
    with pytest.raises(TypeError):
        value_type(int | str)
    with pytest.raises(TypeError):
        value_type(dict)


def test_coerce_only_parses_text_when_asked():
    assert coerce("n", "5", int, parse_text=True) == 5
    with pytest.raises(ConfigError, match="n must be an integer, got '5'"):
        coerce("n", "5", int)
    assert coerce("f", "0.5", float, parse_text=True) == 0.5
    assert coerce("l", "a, b,,c", tuple) == ("a", "b", "c")


def test_librdkafkas_names_and_values_set_the_same_settings():
    producer = ProducerConfig.from_settings({"queue.buffering.max.ms": 7, "request.required.acks": "1",
                                             "compression.codec": "lz4", "message.timeout.ms": 60000,
                                             "message.send.max.retries": 3, "max.in.flight": 1})
    assert (producer.linger_ms, producer.acks, producer.compression_type, producer.delivery_timeout_ms,
            producer.retries, producer.max_in_flight_requests_per_connection) == (7, 1, "lz4", 60000, 3, 1)
    consumer = ConsumerConfig.from_settings({"fetch.wait.max.ms": 50, "fetch.message.max.bytes": 4096,
                                             "topic.metadata.refresh.interval.ms": 1000})
    assert (consumer.fetch_max_wait_ms, consumer.max_partition_fetch_bytes, consumer.metadata_max_age_ms) == \
        (50, 4096, 1000)
    for value, meant in (("smallest", "earliest"), ("beginning", "earliest"), ("largest", "latest"),
                         ("end", "latest"), ("earliest", "earliest")):
        assert ConsumerConfig.from_settings({"auto.offset.reset": value}).auto_offset_reset == meant


def test_hints_are_spelled_as_the_name_was_written():
    with pytest.raises(ConfigError, match=r"'lingerms' \(did you mean 'linger.ms'\?\)"):
        ProducerConfig.from_settings({"lingerms": 5})
    with pytest.raises(ConfigError, match=r"'linger_mss' \(did you mean 'linger_ms'\?\)"):
        ProducerConfig.from_settings({"linger_mss": 5})
    with pytest.raises(ConfigError, match=r"did you mean 'request.required.acks'"):
        ProducerConfig.from_settings({"request.required.ack": 5})
    with pytest.raises(ConfigError, match="queue.buffering.max.ms is a producer setting"):
        ConsumerConfig.from_settings({"queue.buffering.max.ms": 5})


def test_repr_equality_and_hash_cover_every_field():
    # (written once in CommonConfig instead of generated per class: they must still see all fields)
    a, b = ProducerConfig(linger_ms=5), ProducerConfig(linger_ms=5)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != ProducerConfig(linger_ms=6) and a != ProducerConfig(linger_ms=5, client_rack="r1")
    assert ProducerConfig() != ConsumerConfig() and ConsumerConfig() == ConsumerConfig()
    shown = repr(ProducerConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
                                sasl_password="pw-not-shown"))
    assert shown.startswith("ProducerConfig(bootstrap_servers=('localhost:9092',), ")
    assert "sasl_username='u'" in shown and "client_rack=''" in shown and "pw-not-shown" not in shown


@pytest.mark.parametrize("cls", [ProducerConfig, ConsumerConfig, AdminConfig])
def test_setting_types_read_the_annotations_as_get_type_hints_does(cls):
    # (setting_types evaluates each distinct annotation text once instead of calling
    # typing.get_type_hints: the result must be the same)
    import typing

    from kwire.settings import setting_types

    hints = typing.get_type_hints(cls)
    expected = {}
    for f in dataclasses.fields(cls):
        try:
            expected[f.name] = value_type(hints[f.name])
        except TypeError:
            continue
    assert setting_types(cls) == expected and len(expected) > 20
