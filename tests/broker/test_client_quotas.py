"""Client quotas without sockets: DescribeClientQuotas / AlterClientQuotas through dispatch (Kafka's
validation and messages, match types, strict, validate_only, persistence), Kafka's sampled-rate
and throttle-time arithmetic on an injected clock, the order in which quotas match a client, and
throttle_time_ms in Produce / Fetch / other answers (a throttled Fetch answered empty)."""

from __future__ import annotations

import pytest

from kwire.broker.config import load_config
from kwire.broker.dispatch import dispatch
from kwire.broker.quotas import Alteration, ClientQuotaManager, SampledRate, throttle_time_ms
from kwire.broker.state import BrokerState
from kwire.protocol import encode_request, messages
from kwire.protocol.errors import InvalidRequestError, UnsupportedVersionError
from kwire.protocol.quotas import QuotaMatchType

from .conftest import serve

DQ, AQ = messages.DescribeClientQuotasRequest, messages.AlterClientQuotasRequest


def alter(state, entries, validate_only=False, version=1):
    """entries: [({type: name}, {key: value or None})] -> [(error code, message)]."""
    req = AQ(validate_only=validate_only, entries=[AQ.EntryData(
        entity=[AQ.EntryData.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()],
        ops=[AQ.EntryData.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()])
        for entity, ops in entries])
    resp = serve(state, req, version)
    return [(e.error_code, e.error_message) for e in resp.entries]


def describe(state, components=(), strict=False, version=1):
    """components: [(type, match type, match)] -> (error code, message, {frozenset of pairs: {key: value}})."""
    resp = serve(state, DQ(strict=strict, components=[DQ.ComponentData(entity_type=t, match_type=m, match=s)
                                                      for t, m, s in components]), version)
    found = {frozenset((d.entity_type, d.entity_name) for d in e.entity): {v.key: v.value for v in e.values}
             for e in resp.entries or ()}
    return resp.error_code, resp.error_message, found


E, D, S = QuotaMatchType.EXACT, QuotaMatchType.DEFAULT, QuotaMatchType.SPECIFIED


def test_alter_then_describe_with_every_match_type(state):
    assert alter(state, [({"user": "alice"}, {"producer_byte_rate": 1000.0}),
                         ({"user": "alice", "client-id": "app"}, {"consumer_byte_rate": 2000.0}),
                         ({"user": None}, {"request_percentage": 50.5}),
                         ({"client-id": None}, {"producer_byte_rate": 3000.0}),
                         ({"ip": "10.0.0.1"}, {"connection_creation_rate": 5.0})]) == [(0, None)] * 5
    code, _, everything = describe(state)
    assert code == 0 and len(everything) == 5
    assert describe(state, [("user", E, "alice")])[2] == {
        frozenset({("user", "alice")}): {"producer_byte_rate": 1000.0},
        frozenset({("user", "alice"), ("client-id", "app")}): {"consumer_byte_rate": 2000.0}}
    assert describe(state, [("user", E, "alice")], strict=True)[2] == {
        frozenset({("user", "alice")}): {"producer_byte_rate": 1000.0}}
    assert describe(state, [("user", D, None)])[2] == {frozenset({("user", None)}): {"request_percentage": 50.5}}
    assert set(describe(state, [("user", S, None)], strict=True)[2]) == {
        frozenset({("user", "alice")}), frozenset({("user", None)})}
    assert set(describe(state, [("client-id", S, None)])[2]) == {
        frozenset({("user", "alice"), ("client-id", "app")}), frozenset({("client-id", None)})}
    assert describe(state, [("ip", E, "10.0.0.1")])[2] == {
        frozenset({("ip", "10.0.0.1")}): {"connection_creation_rate": 5.0}}
    assert describe(state, strict=True)[2] == {}  # strict with no components matches nothing, as Kafka
    assert describe(state, [("user", E, "nobody")])[2] == {}


def test_remove_and_validate_only(state):
    assert alter(state, [({"client-id": "a"}, {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0})]) == [(0, None)]
    assert alter(state, [({"client-id": "a"}, {"producer_byte_rate": 99.0})], validate_only=True) == [(0, None)]
    assert describe(state)[2] == {frozenset({("client-id", "a")}): {"producer_byte_rate": 10.0,
                                                                     "consumer_byte_rate": 20.0}}
    assert alter(state, [({"client-id": "a"}, {"producer_byte_rate": None})]) == [(0, None)]
    assert describe(state)[2] == {frozenset({("client-id", "a")}): {"consumer_byte_rate": 20.0}}
    assert alter(state, [({"client-id": "a"}, {"consumer_byte_rate": None, "producer_byte_rate": None})]) == [(0, None)]
    assert describe(state)[2] == {}  # an entity without quotas is gone


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ({"user": "u"}, {"bogus_rate": 1.0}, "Invalid configuration key bogus_rate"),
    ({"user": "u"}, {"connection_creation_rate": 1.0}, "Invalid configuration key connection_creation_rate"),
    ({"ip": "10.0.0.1"}, {"producer_byte_rate": 1.0}, "Invalid configuration key producer_byte_rate"),
    ({"user": "u"}, {"producer_byte_rate": -5.0}, "Quota producer_byte_rate must be a positive number, got -5.0"),
    ({"user": "u"}, {"producer_byte_rate": 1.5}, "Configuration producer_byte_rate must be a Long value"),
    ({"group": "g"}, {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: group"),
    ({"user": ""}, {"producer_byte_rate": 1.0}, "Empty user not supported"),
    ({"user": "u", "ip": "10.0.0.1"}, {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ({}, {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ({"ip": "not an address"}, {"connection_creation_rate": 1.0}, "not an address is not a valid IP or resolvable host."),
])
def test_bad_alterations_are_invalid_request_and_change_nothing(state, entity, ops, message):
    assert alter(state, [(entity, ops), ({"user": "ok"}, {"producer_byte_rate": 1.0})]) == [
        (InvalidRequestError.code, message), (0, None)]
    assert describe(state)[2] == {frozenset({("user", "ok")}): {"producer_byte_rate": 1.0}}


def test_one_bad_key_refuses_the_whole_entity(state):
    [(code, message)] = alter(state, [({"user": "u"}, {"producer_byte_rate": 100.0, "request_percentage": -1.0})])
    assert code == InvalidRequestError.code and "request_percentage" in message
    assert describe(state)[2] == {}


def test_duplicate_entity_is_refused(state):
    results = alter(state, [({"user": "u"}, {"producer_byte_rate": 1.0}), ({"user": "u"}, {"producer_byte_rate": 2.0})])
    assert results[0] == (0, None)
    assert results[1][0] == InvalidRequestError.code and results[1][1].startswith("Ignoring duplicate entity")
    assert describe(state)[2] == {frozenset({("user", "u")}): {"producer_byte_rate": 1.0}}


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("user", E, None)], InvalidRequestError.code, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", D, "x")], InvalidRequestError.code, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", S, "x")], InvalidRequestError.code,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], InvalidRequestError.code, "Unknown match type 7"),
    ([("user", S, None), ("user", D, None)], InvalidRequestError.code,
     "Entity type user cannot appear more than once in the filter."),
    ([("", S, None)], InvalidRequestError.code, "Invalid empty entity type."),
    ([("group", S, None)], UnsupportedVersionError.code, "Unsupported entity type group"),
    ([("ip", S, None), ("user", S, None)], InvalidRequestError.code,
     "Invalid entity filter component combination. IP filter component should not be used with user or clientId "
     "filter component."),
])
def test_bad_filters_answer_kafkas_errors(state, components, code, message):
    assert describe(state, components)[:2] == (code, message)


def test_quotas_survive_a_restart(tmp_path):
    config = load_config(None, data_dir=tmp_path / "data", port=9092)
    state = BrokerState(config)
    try:
        alter(state, [({"user": "alice", "client-id": None}, {"producer_byte_rate": 4096.0})])
    finally:
        state.close()
    again = BrokerState(config)
    try:
        assert describe(again)[2] == {frozenset({("user", "alice"), ("client-id", None)}): {"producer_byte_rate": 4096.0}}
        assert again.quota_manager.active
    finally:
        again.close()


def test_a_damaged_store_names_the_file(tmp_path):
    config = load_config(None, data_dir=tmp_path / "data", port=9092)
    BrokerState(config).close()
    path = tmp_path / "data" / "__kwire" / "client-quotas.json"
    path.write_text('{"version": 1, "entities": [{"entity": {"user": "u"}, "quotas": {"nope": 1}}]}')
    with pytest.raises(ValueError, match="client-quotas.json.*Invalid configuration key nope"):
        BrokerState(config)


# -- Kafka's rate and throttle arithmetic -------------------------------------------------------------


def test_sampled_rate_counts_at_least_the_full_windows():
    rate = SampledRate(11, 1000)
    rate.record(1000, 0)
    # One value at the start: measured over 10 windows (samples - 1), not over 0 ms.
    assert rate.window_size_ms(0) == 10_000
    assert rate.rate(0) == pytest.approx(100.0)
    rate.record(1000, 5500)
    # 5.5 s elapsed: 5 full windows, topped up to 10 (Kafka adds the missing full windows to the elapsed time)
    assert rate.window_size_ms(5500) == 10_500
    assert rate.window_size_ms(10_500) == 10_500
    assert rate.rate(10_500) == pytest.approx(2000 * 1000 / 10_500)
    # Samples older than 11 windows are forgotten.
    assert rate.rate(30_000) == 0.0


def test_throttle_time_is_kafkas_formula():
    rate = SampledRate(11, 1000)
    rate.record(3000, 0)  # 300 B/s over the 10 s floor, against 100 B/s
    # (observed - bound) / bound * window = (300 - 100) / 100 * 10 s
    assert throttle_time_ms(rate, 100.0, 0) == 20_000
    assert throttle_time_ms(rate, 300.0, 0) == 0


class Clock:
    def __init__(self):
        self.ms = 1_000_000.0

    def __call__(self):
        return self.ms


def manager_with(state, entries, clock=None):
    state.client_quotas.alter([Alteration(list(e.items()), list(o.items())) for e, o in entries])
    state.quota_manager = ClientQuotaManager(state.client_quotas, now_ms=clock or Clock())
    return state.quota_manager


def test_precedence_of_matching_quotas(state):
    levels = [({"user": "u", "client-id": "c"}, 1.0), ({"user": "u", "client-id": None}, 2.0), ({"user": "u"}, 3.0),
              ({"user": None, "client-id": "c"}, 4.0), ({"user": None, "client-id": None}, 5.0), ({"user": None}, 6.0),
              ({"client-id": "c"}, 7.0), ({"client-id": None}, 8.0)]
    m = manager_with(state, [(e, {"producer_byte_rate": v}) for e, v in levels])
    for entity, value in levels:
        assert m.quota("producer_byte_rate", "u", "c")[0] == value
        state.client_quotas.alter([Alteration(list(entity.items()), [("producer_byte_rate", None)])])
    assert m.quota("producer_byte_rate", "u", "c") is None
    assert not m.active


def test_a_user_quota_is_shared_by_the_users_clients(state):
    m = manager_with(state, [({"user": "u"}, {"producer_byte_rate": 100.0})])
    assert m.record("producer_byte_rate", "u", "a", 1000) == 0  # 100 B/s over the 10 s floor: at the bound
    assert m.record("producer_byte_rate", "u", "b", 1000) == 10_000  # the same rate: now 200 B/s
    assert m.record("producer_byte_rate", "v", "a", 1000) == 0  # another user: no quota


def produce_request(topic: str, nbytes: int, acks: int = 1):
    from kwire.protocol.records import RecordBatchBuilder

    builder = RecordBatchBuilder()
    builder.append(None, b"x" * nbytes, timestamp=0)
    R = messages.ProduceRequest
    return R(acks=acks, timeout_ms=1000, transactional_id=None, topic_data=[R.TopicProduceData(
        name=topic, partition_data=[R.TopicProduceData.PartitionProduceData(index=0, records=builder.build())])])


def create_topic(state, name):
    R = messages.CreateTopicsRequest
    serve(state, R(topics=[R.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[],
                                            configs=[])], timeout_ms=1000, validate_only=False), 5)


def test_produce_over_its_quota_gets_throttle_time_and_is_stored(state):
    create_topic(state, "t")
    clock = Clock()
    manager_with(state, [({"client-id": "test"}, {"producer_byte_rate": 1000.0})], clock)
    first = serve(state, produce_request("t", 5000), 9)
    assert first.throttle_time_ms == 0  # the first 10 s of budget: 10 000 B
    second = serve(state, produce_request("t", 10_000), 9)
    assert second.throttle_time_ms > 0
    assert second.responses[0].partition_responses[0].error_code == 0  # Kafka throttles after appending
    assert state.logs.get("t", 0).log_end_offset == 2
    clock.ms += 60_000  # a minute later the windows have expired
    assert serve(state, produce_request("t", 100), 9).throttle_time_ms == 0


def test_fetch_over_its_quota_is_answered_empty(state):
    create_topic(state, "t")
    serve(state, produce_request("t", 20_000), 9)
    clock = Clock()
    manager_with(state, [({"client-id": "test"}, {"consumer_byte_rate": 1000.0})], clock)
    R = messages.FetchRequest

    def fetch():
        return serve(state, R(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 * 1024 * 1024,
                              isolation_level=0, session_id=0, session_epoch=-1, topics=[R.FetchTopic(
                                  topic="t", partitions=[R.FetchTopic.FetchPartition(
                                      partition=0, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])],
                              forgotten_topics_data=[], rack_id=""), 11)

    first = fetch()  # 20 kB at 1 kB/s: over the quota at once
    assert first.throttle_time_ms > 0 and first.responses == [] and first.error_code == 0
    # The empty answer was not counted: the same throttle again (the rate did not grow).
    assert fetch().throttle_time_ms == first.throttle_time_ms


def test_request_percentage_throttles_any_request(state):
    clock = Clock()
    m = manager_with(state, [({"client-id": "test"}, {"request_percentage": 0.0001})], clock)
    throttles = [serve(state, messages.MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).throttle_time_ms
                 for _ in range(3)]
    assert max(throttles) > 0
    assert max(throttles) <= m.window_ms  # Kafka bounds request-time throttling by one window


def test_acks0_produce_over_its_quota_mutes_without_an_answer(state):
    create_topic(state, "t")
    manager_with(state, [({"client-id": "test"}, {"producer_byte_rate": 10.0})])
    frame = encode_request(produce_request("t", 5000, acks=0), 9, 1, client_id="test")[4:]
    reply = dispatch(state, frame, client_host="127.0.0.1:1", connection_id=1)
    assert reply is not None and reply.parts == [] and reply.throttle_ms > 0 and not reply.hold


def test_an_old_produce_version_has_its_answer_held(state):
    create_topic(state, "t")
    manager_with(state, [({"client-id": "test"}, {"producer_byte_rate": 10.0})])
    frame = encode_request(produce_request("t", 5000), 5, 1, client_id="test")[4:]
    reply = dispatch(state, frame, client_host="127.0.0.1:1", connection_id=1)
    assert reply.throttle_ms > 0 and reply.hold  # Produce v5 predates KIP-219: the broker delays it


def test_connection_creation_rate_per_ip(state):
    clock = Clock()
    m = manager_with(state, [({"ip": "10.0.0.1"}, {"connection_creation_rate": 1.0}),
                             ({"ip": None}, {"connection_creation_rate": 100.0})], clock)
    assert m.ip_active
    # 1 connection/s over the 10-window floor: 10 at once, the 11th is held for at most one window.
    assert [m.connection_throttle_ms("10.0.0.1") for _ in range(10)] == [0] * 10
    assert 0 < m.connection_throttle_ms("10.0.0.1") <= 1000
    assert 0 < m.connection_throttle_ms("::ffff:10.0.0.1") <= 1000  # the same address, IPv4-mapped
    assert m.connection_throttle_ms("10.0.0.2") == 0  # the default ip quota: 100/s
    clock.ms += 60_000
    assert m.connection_throttle_ms("10.0.0.1") == 0  # a refused connection was not counted


def test_a_long_poll_counts_its_work_not_its_wait(state):
    """request_percentage counts the time a handler runs on the loop: a Fetch that waits 300 ms for data
    that never comes is answered, and the wait is not counted as work."""
    create_topic(state, "t")
    clock = Clock()
    m = manager_with(state, [({"client-id": "test"}, {"request_percentage": 1000.0})], clock)
    R = messages.FetchRequest
    resp = serve(state, R(replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                          session_id=0, session_epoch=-1, topics=[R.FetchTopic(
                              topic="t", partitions=[R.FetchTopic.FetchPartition(
                                  partition=0, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])],
                          forgotten_topics_data=[], rack_id=""), 11)
    assert resp.error_code == 0 and resp.throttle_time_ms == 0
    [rate] = [r for tags, r in m._rates.items() if tags[0] == "request_percentage"]
    # 300 ms waited would be 30 (percent of a second); the handler's own steps are a small fraction of it.
    assert 0 < rate.rate(clock.ms) * 10 < 30
