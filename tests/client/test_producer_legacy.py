"""The producer and a 0.10-era broker that speaks only Produce v0-2 (message format v0/v1).

librdkafka's mock cluster takes uncompressed message sets (test_producer_mock reads them back
with confluent-kafka) but refuses compressed ones, and kwire's broker speaks Produce v3+ only (as
Kafka 4 does).  So the broker here is a small loopback server answering ApiVersions v0, Metadata
v0-1 and Produce v0-2 as Kafka 0.10 did, keeping what it is sent; kafka-python's own legacy record
reader (code kwire did not write) then checks every message set: CRCs, magic, codec, keys, values,
timestamps.  It also shows the producer finding out about an old broker by itself.
"""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest
from kafka.record import MemoryRecords

from kwire.client.errors import UnsupportedApiError
from kwire.client.producer import AsyncProducer
from kwire.protocol import decode_request, encode_response, messages
from kwire.settings import ConfigError

API_VERSIONS, METADATA, PRODUCE = 18, 3, 0
PARTITIONS = 2
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


class OldBroker:
    """One node of a Kafka 0.10-era cluster, as a producer sees it.  Topics exist on first mention."""

    def __init__(self, produce_versions: tuple[int, int] = (0, 2)):
        self.produce_versions = produce_versions
        self.logs: dict[tuple[str, int], list[bytes]] = {}   # message sets as received
        self.counts: dict[tuple[str, int], int] = {}
        self.produce_versions_seen: set[int] = set()
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> OldBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def bootstrap(self) -> str:
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                body = await reader.readexactly(size)
                key, version, correlation_id = struct.unpack_from(">hhi", body)
                reply = self._answer(key, version, body)
                if reply is not None:
                    writer.write(encode_response(reply[0], reply[1], correlation_id))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, key: int, version: int, body: bytes):
        keys = messages.ApiVersionsResponse.ApiVersion
        if key == API_VERSIONS:
            # 0.10 knows ApiVersions v0 only: anything newer gets its v0 refusal (KIP-511 keeps
            # that behaviour), with the versions it has.
            supported = [keys(api_key=PRODUCE, min_version=self.produce_versions[0],
                              max_version=self.produce_versions[1]),
                         keys(api_key=METADATA, min_version=0, max_version=1),
                         keys(api_key=API_VERSIONS, min_version=0, max_version=0)]
            return messages.ApiVersionsResponse(error_code=35 if version else 0, api_keys=supported), 0
        _, request = decode_request(body)
        if key == METADATA:
            return self._metadata(request), version
        if key == PRODUCE:
            self.produce_versions_seen.add(version)
            return self._produce(request), version
        raise AssertionError(f"an 0.10 producer would not send api {key}")

    def _metadata(self, request):
        r = messages.MetadataResponse
        host, port = self.bootstrap.split(":")
        topics = [r.MetadataResponseTopic(error_code=0, name=t.name, is_internal=False, partitions=[
            r.MetadataResponseTopic.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=0,
                                                              replica_nodes=[0], isr_nodes=[0])
            for p in range(PARTITIONS)]) for t in request.topics or []]
        return r(brokers=[r.MetadataResponseBroker(node_id=0, host=host, port=int(port))], controller_id=0,
                 topics=topics)

    def _produce(self, request):
        r = messages.ProduceResponse
        topics = []
        for td in request.topic_data:
            parts = []
            for pd in td.partition_data:
                key = (td.name, pd.index)
                base = self.counts.get(key, 0)
                self.logs.setdefault(key, []).append(bytes(pd.records))
                self.counts[key] = base + sum(len(list(batch)) for batch in _batches(bytes(pd.records)))
                parts.append(r.TopicProduceResponse.PartitionProduceResponse(index=pd.index, error_code=0,
                                                                             base_offset=base))
            topics.append(r.TopicProduceResponse(name=td.name, partition_responses=parts))
        return r(responses=topics)


def _batches(data: bytes):
    records = MemoryRecords(data)
    while records.has_next():
        yield records.next_batch()


def stored(broker: OldBroker, topic: str) -> list[tuple[int, int, int, bytes | None, bytes | None, int | None]]:
    """(partition, magic, codec, key, value, timestamp) of every record the broker got, as
    kafka-python reads the message sets (CRCs checked)."""
    out = []
    for (name, partition), sets in sorted(broker.logs.items()):
        if name != topic:
            continue
        for data in sets:
            for batch in _batches(data):
                assert batch.validate_crc()
                out.extend((partition, batch.magic, batch.compression_type, r.key, r.value, r.timestamp)
                           for r in batch)
    return out


@pytest.mark.parametrize("codec", list(CODEC_IDS))
@pytest.mark.parametrize("produce_version,magic", [(2, 1), (1, 0), (0, 0)])
def test_message_sets_for_a_broker_without_record_batches(codec, produce_version, magic, caplog):
    async def main():
        async with OldBroker((0, produce_version)) as broker:
            conf = {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 2,
                    "batch.size": 1024}
            async with AsyncProducer(conf) as producer:
                futures = [await producer.send("old", b"value-%03d" % i, key=b"k%d" % i if i % 2 else None,
                                               timestamp_ms=1_600_000_000_000 + i) for i in range(120)]
                metadatas = await asyncio.gather(*futures)
            return broker, metadatas

    caplog.set_level(logging.WARNING, logger="kwire.client.producer")
    broker, metadatas = asyncio.run(asyncio.wait_for(main(), 30))
    assert broker.produce_versions_seen == {produce_version}
    got = stored(broker, "old")
    assert {(m, c) for _, m, c, *_ in got} == {(magic, CODEC_IDS[codec])}
    assert sorted(v for *_, v, _ in got) == [b"value-%03d" % i for i in range(120)]
    by_value = {v: (p, k, ts) for p, _, _, k, v, ts in got}
    for i, md in enumerate(metadatas):
        partition, key, timestamp = by_value[b"value-%03d" % i]
        assert md.partition == partition and md.offset >= 0
        assert key == (b"k%d" % i if i % 2 else None)
        # magic 0 has no timestamps at all
        assert timestamp == (1_600_000_000_000 + i if magic == 1 else None)
    for partition in range(PARTITIONS):  # per-partition order
        values = [v for p, *_, v, _ in got if p == partition]
        assert values == sorted(values)
    # Idempotence was only on by default: turned off, with a warning that says why.
    assert any("only speaks Produce v0-2" in r.getMessage() and "idempotence is off" in r.getMessage()
               for r in caplog.records)


def test_idempotence_asked_for_explicitly_is_an_error_with_such_a_broker():
    async def main():
        async with OldBroker() as broker:
            producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
            with pytest.raises(UnsupportedApiError, match=r"enable.idempotence=true, but .* only speaks Produce v0-2"):
                await producer.start()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_headers_and_zstd_need_record_batches():
    async def main():
        async with OldBroker() as broker:
            with pytest.raises(ConfigError, match="zstd needs Produce v3"):
                await AsyncProducer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd"}).start()
            async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
                with pytest.raises(ValueError, match="headers need Produce v3"):
                    await producer.send("old", b"v", headers=[("h", b"1")])
                return await (await producer.send("old", b"v"))

    assert asyncio.run(asyncio.wait_for(main(), 30)).offset == 0


def test_a_forced_old_produce_version_against_a_new_broker_is_what_tests_use():
    """The internal ``_max_produce_version`` caps the version (for tests): a broker with Produce
    v0-13 then gets message sets too."""
    async def main():
        async with OldBroker((0, 9)) as broker:
            async with AsyncProducer({"bootstrap.servers": broker.bootstrap}, _max_produce_version=2) as producer:
                await (await producer.send("capped", b"v", timestamp_ms=5))
            return broker

    broker = asyncio.run(asyncio.wait_for(main(), 30))
    assert broker.produce_versions_seen == {2}
    assert [record[1:] for record in stored(broker, "capped")] == [(1, 0, None, b"v", 5)]
