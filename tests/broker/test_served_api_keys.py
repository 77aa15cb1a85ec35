"""Every client-facing api key of Kafka 4.3 is served by kwire's broker with (at least) the
versions a one-node Kafka 4.3 serves, read from Kafka's own definition sets: a key is
client-facing when its request's ``listeners`` include "broker" (the 4.3 file's listeners, else
the 4.0 file's), minus the keys only brokers send each other (``NOT_CLIENT_FACING``, each with the
reason).  Kafka 4.3's versions are those of the newest file for the key: kwire's additions in
tools/kafka-protocol-extra/messages-4.3 (layouts the shared set lacks), then the shared
messages-4.3/, then messages/ (a Kafka 4.0 snapshot, for keys whose layout did not change since:
its maximum is 4.3's, its minimum may predate KIP-896's removals).

kwire may serve versions older than 4.3's minimum (KIP-896 dropped them from Kafka; kwire still
speaks them, and advertises exactly what it implements); newer than 4.3 it never goes.  Checked
against a real broker through kwire's client connection (its ApiVersions answer), and runnable as
a script that prints the table: ``python -m tests.broker.test_served_api_keys``.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.handlers import HANDLERS
from kwire.broker.handlers.api_versions import UNADVERTISED
from kwire.client.config import parse_host_port
from kwire.client.connection import BrokerConnection
from kwire.client.errors import UnsupportedApiError
from kwire.protocol import ApiKey

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "kafka-protocol"
EXTRA = ROOT / "tools" / "kafka-protocol-extra" / "messages-4.3"

# Keys whose definitions list the broker listener but that no client sends: the share-group state
# apis (KIP-932), sent by a broker leading share partitions to the share coordinator
# (broker-to-coordinator, like WriteTxnMarkers' coordinator-to-leader), and served by kwire's
# share groups in-process.  A client asking gets UNSUPPORTED_VERSION, as kwire advertises none.
NOT_CLIENT_FACING = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: "broker to share coordinator (KIP-932 share-state)",
    ApiKey.READ_SHARE_GROUP_STATE: "broker to share coordinator (KIP-932 share-state)",
    ApiKey.WRITE_SHARE_GROUP_STATE: "broker to share coordinator (KIP-932 share-state)",
    ApiKey.DELETE_SHARE_GROUP_STATE: "broker to share coordinator (KIP-932 share-state)",
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "broker to share coordinator (KIP-932 share-state)",
}


@dataclass(frozen=True)
class KafkaApi:
    key: int
    name: str
    versions: tuple[int, int]  # what a Kafka 4.3 broker serves
    source: str  # the definition set the versions come from


def _load(path: Path) -> dict:
    return json.loads(re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M))


def _requests(folder: Path) -> dict[int, dict]:
    return {d["apiKey"]: d for d in map(_load, sorted(folder.glob("*Request.json")))}


def _range(spec: str) -> tuple[int, int]:
    low, _, high = spec.strip().partition("-")
    return int(low), int(high or low)


def _definition_sets() -> list[tuple[str, dict[int, dict]]]:
    # Newest first: kwire's additions, Kafka 4.3's, Kafka 4.0's (a snapshot from before KIP-896
    # raised minimum versions: its maximum is 4.3's for the keys the newer sets lack).
    return [("tools/kafka-protocol-extra", _requests(EXTRA)), ("messages-4.3", _requests(SHARED / "messages-4.3")),
            ("messages (4.0)", _requests(SHARED / "messages"))]


def _listeners(sets, key: int) -> list[str] | None:
    # kwire's extra files keep structure only: the listeners come from the newest file naming them.
    return next((defs[key]["listeners"] for _, defs in sets if "listeners" in defs.get(key, {})), None)


def kafka_4_3_broker_apis() -> dict[int, KafkaApi]:
    """Every api key whose request lists the broker listener, with Kafka 4.3's versions."""
    sets = _definition_sets()
    apis = {}
    for key in sorted(set().union(*(defs for _, defs in sets))):
        source, newest = next((name, defs[key]) for name, defs in sets if key in defs)
        if "broker" in (_listeners(sets, key) or []):
            apis[key] = KafkaApi(key, ApiKey(key).name, _range(newest["validVersions"]), source)
    return apis


def client_facing() -> dict[int, KafkaApi]:
    return {k: a for k, a in kafka_4_3_broker_apis().items() if k not in NOT_CLIENT_FACING}


async def _advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    conn = await BrokerConnection.open(*parse_host_port(bootstrap))
    try:
        return dict(conn.broker_versions)
    finally:
        conn.close()


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as b:
        yield b


def test_the_definition_sets_name_the_keys_this_checks():
    sets = _definition_sets()
    # A key no file gives listeners for could not be told client-facing or not: none may be left so.
    assert [k for k in set().union(*(d for _, d in sets)) if _listeners(sets, k) is None] == []
    apis = kafka_4_3_broker_apis()
    # The excluded keys really are broker-listener keys of the definitions (or excluding them says nothing).
    assert set(NOT_CLIENT_FACING) <= set(apis)
    facing = client_facing()
    assert len(facing) >= 65, sorted(facing)  # Kafka 4.3 answers some 70 client apis on a broker
    assert facing[ApiKey.ADD_RAFT_VOTER].versions == (0, 1)  # KIP-1186, from kwire's extra layouts
    assert facing[ApiKey.PRODUCE].versions == (3, 13)  # KIP-896's raised minimum
    # KIP-1071's streams groups (GA in Kafka 4.2), from kwire's extra layouts: v0 in Kafka 4.3.
    assert facing[ApiKey.STREAMS_GROUP_HEARTBEAT].versions == (0, 0)
    assert facing[ApiKey.STREAMS_GROUP_DESCRIBE].versions == (0, 0)


def test_every_client_facing_key_is_served_with_kafka_4_3s_versions(broker):
    advertised = asyncio.run(asyncio.wait_for(_advertised(broker.bootstrap), 30))
    missing, short, beyond = [], [], []
    for key, api in client_facing().items():
        # Telemetry is served but not advertised (Kafka without a metrics plugin): its range is the handler's.
        got = (HANDLERS[key].min_version, HANDLERS[key].max_version) if key in UNADVERTISED and key in HANDLERS \
            else advertised.get(key)
        if got is None:
            missing.append(api.name)
        elif got[1] < api.versions[1] or got[0] > api.versions[0]:
            short.append((api.name, got, api.versions))
        elif got[1] > api.versions[1]:
            beyond.append((api.name, got, api.versions))
    assert not missing, f"client-facing keys kwire does not serve: {missing}"
    assert not short, f"Kafka 4.3 versions kwire lacks: {short}"
    assert not beyond, f"versions newer than Kafka 4.3's: {beyond}"


def test_broker_to_coordinator_keys_are_not_offered_to_clients(broker):
    """Not advertised, so a client finds no version to send; one sent anyway closes the connection
    (its response has no top-level error code to refuse it with), as Kafka does."""
    async def go() -> None:
        conn = await BrokerConnection.open(*parse_host_port(broker.bootstrap))
        try:
            assert not set(NOT_CLIENT_FACING) & set(conn.broker_versions)
            for key in NOT_CLIENT_FACING:
                with pytest.raises(UnsupportedApiError, match="does not support"):
                    conn.version_for(key)
        finally:
            conn.close()

    asyncio.run(asyncio.wait_for(go(), 30))


def main() -> None:
    """Print each broker-listener key: Kafka 4.3's versions, where they come from, kwire's."""
    with EmbeddedBroker() as b:
        advertised = asyncio.run(_advertised(b.bootstrap))
    for key, api in kafka_4_3_broker_apis().items():
        kwire = (HANDLERS[key].min_version, HANDLERS[key].max_version) if key in UNADVERTISED and key in HANDLERS \
            else advertised.get(key)
        note = NOT_CLIENT_FACING.get(key, "served, not advertised (no metrics plugin)" if key in UNADVERTISED else "")
        print(f"{key:3} {api.name:34} kafka 4.3 {api.versions[0]}-{api.versions[1]} ({api.source:26}) "
              f"kwire {'-'.join(map(str, kwire)) if kwire else 'none':5} {note}")


if __name__ == "__main__":
    main()
