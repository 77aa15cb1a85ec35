"""Partitioners: a keyed record lands where the Java client and librdkafka put it.

Judged by real peers: murmur2 against kafka-python's port of Java's ``Utils.murmur2`` (and
Kafka's published vectors), every partitioner against librdkafka producing the same keys and
reporting the partitions it chose.  Then the sticky and random choices on their own.
"""

from __future__ import annotations

import functools
import random
import zlib
from collections import Counter

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kwire.broker import EmbeddedBroker
from kwire.client.config import ProducerConfig
from kwire.client.partitioner import PARTITIONERS, Partitioner, consistent, java_partition, murmur2

# Kafka's UtilsTest.testMurmur2: Java's signed results.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def random_keys(rng: random.Random, per_length: int, max_length: int = 100) -> list[bytes]:
    """``per_length`` random keys of every length 0..max_length (every remainder mod 4)."""
    return [rng.randbytes(n) for n in range(max_length + 1) for _ in range(per_length)]


# -- murmur2 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,expected", JAVA_VECTORS.items())
def test_murmur2_gives_javas_published_results(key, expected):
    assert murmur2(key) == expected


def test_murmur2_matches_kafka_python_on_thousands_of_keys():
    rng = random.Random(480)
    keys = random_keys(rng, 40) + [bytes([b]) * n for b in (0, 0x7F, 0x80, 0xFF) for n in range(13)]
    for key in keys:
        theirs = kafka_python_murmur2(key)  # unsigned 32-bit
        ours = murmur2(key)
        assert -2**31 <= ours < 2**31, key
        assert ours & 0xFFFFFFFF == theirs, key
        for n in (1, 2, 3, 7, 12, 100, 1000):
            assert java_partition(key, n) == (theirs & 0x7FFFFFFF) % n, (key, n)


def test_a_keyed_record_goes_where_kafka_python_puts_it_compiled_or_not(monkeypatch):
    """The per-record path hashes with the compiled helper where it is built: same partitions."""
    from kwire.protocol.records import bulk

    rng = random.Random(481)
    keys = random_keys(rng, 40) + [b"", b"user-1", b"a-little-bit-longer-string"]
    compiled = Partitioner("murmur2_random")
    assert compiled._hash_one is not java_partition, "the compiled helper is not built"
    monkeypatch.setattr(bulk, "murmur2_partitions", lambda keys, n: None)
    plain = Partitioner("murmur2_random")
    assert plain._hash_one is java_partition
    for key in keys:
        for n in (1, 3, 8, 1000):
            expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % n
            assert compiled.partition("t", key, n) == plain.partition("t", key, n) == expected, (key, n)


def test_murmur2_takes_any_bytes_like_key():
    key = b"a-little-bit-longer-string"
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == JAVA_VECTORS[key]


def test_consistent_is_zlibs_crc32():
    for key in random_keys(random.Random(2), 3):
        assert consistent(key, 7) == zlib.crc32(key) % 7


# -- against librdkafka ---------------------------------------------------------------------------
# librdkafka chooses the partition itself, before sending, and reports it in the delivery report:
# any broker will do.  kwire's embedded one, because librdkafka's mock cluster cannot make the
# topics this needs: it has no CreateTopics (librdkafka 2.16), and the topics it auto-creates have
# 4 partitions, a power of two that would compare only the hash's two lowest bits.
PARTITION_COUNTS = (7, 12)


@pytest.fixture(scope="module")
def librdkafka_cluster():
    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic(f"p{n}", n, 1) for n in PARTITION_COUNTS], operation_timeout=10)
        for future in futures.values():
            future.result(30)
        yield broker.bootstrap


def librdkafka_partitions(bootstrap: str, partitioner: str, topic: str, keys: list[bytes | None]) -> list[int]:
    """The partition librdkafka's ``partitioner`` gave each key, in order of ``keys``."""
    got: dict[int, int] = {}
    errors = []

    def report(i, err, msg):
        if err is not None:
            errors.append(err)
        else:
            got[i] = msg.partition()

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner,
                                         "linger.ms": 5, "log_level": 3})
    producer.list_topics(topic, timeout=10)  # learn the partition count before producing
    for i, key in enumerate(keys):
        producer.produce(topic, value=b"v", key=key, on_delivery=functools.partial(report, i))
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors
    return [got[i] for i in range(len(keys))]


def hashed_alike(partitioner: str, key: bytes | None) -> bool:
    """Whether librdkafka's ``partitioner`` hashes ``key`` (rather than choosing at random)."""
    if partitioner in ("murmur2", "consistent"):
        return True
    if partitioner == "murmur2_random":
        return key is not None
    return bool(key)  # consistent_random: an empty key is no key


@pytest.mark.parametrize("partitioner", ["murmur2_random", "consistent_random", "murmur2", "consistent"])
@pytest.mark.parametrize("count", PARTITION_COUNTS)
def test_keys_land_where_librdkafka_puts_them(librdkafka_cluster, partitioner, count):
    rng = random.Random(f"{partitioner}-{count}")
    keys: list[bytes | None] = [rng.randbytes(rng.randrange(1, 101)) for _ in range(250)]
    keys += [b"user-%d" % i for i in range(50)] + [b"", None, b"", None]
    theirs = librdkafka_partitions(librdkafka_cluster, partitioner, f"p{count}", keys)
    ours = Partitioner(partitioner)
    compared = 0
    for key, their_partition in zip(keys, theirs, strict=True):
        assert 0 <= their_partition < count
        if hashed_alike(partitioner, key):
            assert ours.partition(f"p{count}", key, count) == their_partition, key
            compared += 1
    assert compared >= 300
    if partitioner in ("murmur2", "consistent"):  # None and b"" hash as the empty key
        assert {theirs[keys.index(None)], theirs[keys.index(b"")]} == {ours.partition("t", None, count)}


# -- sticky and random choices ------------------------------------------------------------------
def test_keyless_records_stick_to_a_partition_until_its_batch_closes():
    p = Partitioner("murmur2_random", rng=random.Random(1))
    first = p.partition("t", None, 10)
    assert {p.partition("t", None, 10) for _ in range(100)} == {first}
    p.on_new_batch("t", (first + 1) % 10)  # another partition's batch: no move
    assert p.partition("t", None, 10) == first
    p.on_new_batch("t", first)
    second = p.partition("t", None, 10)
    assert second != first
    assert {p.partition("t", None, 10) for _ in range(100)} == {second}


def test_each_topic_has_its_own_sticky_partition():
    p = Partitioner("murmur2_random", rng=random.Random(3))
    a, b = p.partition("a", None, 50), p.partition("b", None, 50)
    p.on_new_batch("a", a)
    assert p.partition("a", None, 50) != a
    assert p.partition("b", None, 50) == b


@pytest.mark.parametrize("name", ["murmur2_random", "consistent_random"])
def test_sticky_choices_keep_to_available_partitions_and_cover_them_all(name):
    rng = random.Random(name)
    p = Partitioner(name, rng=random.Random(name + "!"))
    seen: Counter[int] = Counter()
    for _ in range(3000):
        available = sorted(rng.sample(range(12), rng.randrange(1, 13)))
        chosen = p.partition("t", None, 12, available)
        assert chosen in available
        assert p.partition("t", None, 12, available) == chosen  # sticky until the batch closes
        p.on_new_batch("t", chosen)
        after = p.partition("t", None, 12, available)
        assert after in available
        if len(available) >= 2:
            assert after != chosen
        seen[after] += 1
    assert set(seen) == set(range(12))


def test_sticky_spread_is_even_over_many_batches():
    p = Partitioner("murmur2_random", rng=random.Random(5))
    seen: Counter[int] = Counter()
    for _ in range(7000):
        chosen = p.partition("t", None, 7)
        seen[chosen] += 1
        p.on_new_batch("t", chosen)
    assert set(seen) == set(range(7))
    assert all(800 <= n <= 1200 for n in seen.values()), seen  # 1000 expected each


def test_sticky_partition_that_becomes_unavailable_is_left():
    p = Partitioner("murmur2_random", rng=random.Random(7))
    first = p.partition("t", None, 6)
    others = [i for i in range(6) if i != first]
    moved = p.partition("t", None, 6, others)
    assert moved in others
    assert p.partition("t", None, 6) == moved  # and it sticks to the new one


def test_sticky_partition_beyond_a_shrunk_count_is_left():
    p = Partitioner("murmur2_random", rng=random.Random(8))
    while p.partition("t", None, 20) < 10:
        p.on_new_batch("t", p.partition("t", None, 20))
    assert p.partition("t", None, 10) < 10


def test_one_available_partition_is_chosen_again_after_its_batch():
    p = Partitioner("murmur2_random", rng=random.Random(9))
    assert p.partition("t", None, 8, [3]) == 3
    p.on_new_batch("t", 3)
    assert p.partition("t", None, 8, [3]) == 3


def test_no_available_partition_means_any():
    p = Partitioner("murmur2_random", rng=random.Random(10))
    seen = set()
    for _ in range(200):
        seen.add(p.partition("t", None, 5, []))
        p.on_new_batch("t", p.partition("t", None, 5, []))
    assert seen == set(range(5))


def test_random_partitioner_draws_every_record_anew_within_available():
    p = Partitioner("random", rng=random.Random(11))
    keyed = Counter(p.partition("t", b"same key", 9) for _ in range(900))
    keyless = Counter(p.partition("t", None, 9, [1, 4, 6]) for _ in range(300))
    assert set(keyed) == set(range(9))
    assert set(keyless) == {1, 4, 6}


def test_keyed_records_ignore_availability():
    # The key's partition even when it has no leader now: the key keeps its partition.
    key = b"order-17"
    target = java_partition(key, 9)
    assert Partitioner().partition("t", key, 9, [i for i in range(9) if i != target]) == target


def test_empty_key_is_hashed_by_murmur2_random_and_keyless_for_consistent_random():
    assert Partitioner("murmur2_random").partition("t", b"", 7) == java_partition(b"", 7)
    p = Partitioner("consistent_random", rng=random.Random(12))
    first = p.partition("t", b"", 7)
    assert p.partition("t", None, 7) == first  # the same sticky partition as no key
    p.on_new_batch("t", first)
    assert p.partition("t", b"", 7) != first


def test_ignore_keys_makes_every_record_keyless():
    p = Partitioner("murmur2_random", ignore_keys=True, rng=random.Random(13))
    keys = [b"k%d" % i for i in range(50)]
    assert len({p.partition("t", k, 16) for k in keys}) == 1  # sticky, whatever the key
    assert Partitioner("murmur2", ignore_keys=True).partition("t", b"k", 16) == java_partition(b"", 16)


def test_built_from_the_producer_config():
    p = Partitioner.from_config(ProducerConfig(partitioner="consistent", partitioner_ignore_keys=True))
    assert (p.name, p.ignore_keys) == ("consistent", True)
    assert set(PARTITIONERS) == {"murmur2_random", "consistent_random", "murmur2", "consistent", "random"}


def test_bad_partitioner_name_and_partition_count():
    with pytest.raises(ValueError, match="partitioner must be one of"):
        Partitioner("fnv1a")
    with pytest.raises(ValueError, match="no partitions"):
        Partitioner().partition("t", b"k", 0)
