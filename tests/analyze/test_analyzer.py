"""The driver: which connections carry Kafka or MongoDB, decided from the ports or the traffic."""

from __future__ import annotations

import pytest

from kwire.analyze.analyzer import AnalyzeOptions, decode_captures

from .helpers import DEEPFLOW

KAFKA = sorted((DEEPFLOW / "kafka").glob("*.pcap"))
MONGO = sorted((DEEPFLOW / "mongo").glob("*.pcap"))


def _key(ex):
    return (ex.conn, ex.client, ex.server, ex.api, ex.api_version, ex.correlation_id, ex.status,
            ex.request_frame, ex.response_frame, ex.request_bytes, ex.response_bytes)


@pytest.mark.parametrize("path", KAFKA + MONGO, ids=lambda p: p.name)
def test_detected_from_the_traffic_as_when_the_ports_are_named(path):
    detected, dec = decode_captures([path])
    # 36333: the broker port of DeepFlow's Kafka test cluster; 3717 and 27017 its MongoDB ports.
    named, _ = decode_captures([path], AnalyzeOptions(kafka_ports=frozenset({9092, 36333}),
                                                      mongo_ports=frozenset({27017, 3717})))
    assert detected and [_key(e) for e in detected] == [_key(e) for e in named]
    assert all(e.status in ("answered", "no_response") for e in detected)
    assert {c["protocol"] for c in dec.connections} == {"mongodb" if path in MONGO else "kafka"}
    assert not dec.warnings.total


def test_roles_guessed_the_wrong_way_round_are_swapped():
    # No SYN in this capture and the broker listens on the higher port (36333), so the TCP layer
    # takes the broker for the client; the client's JoinGroup request, spoken first, corrects it.
    exchanges, dec = decode_captures([DEEPFLOW / "kafka" / "11-join-group-v7.pcap"])
    (ex,) = exchanges
    assert ex.api == "JoinGroup" and ex.server.endswith(":36333")
    assert dec.connections[0]["roles"] == "swapped" and dec.connections[0]["server"].endswith(":36333")
    assert dec.connections[0]["bytes_to_server"] == ex.request_bytes


def test_only_the_named_ports_are_analyzed():
    exchanges, dec = decode_captures(KAFKA, AnalyzeOptions(kafka_ports=frozenset({9092})))
    assert exchanges and all(e.server.endswith(":9092") for e in exchanges)
    # The other connections are listed, as not analyzed.
    assert {(c["protocol"], c["server"].endswith(":9092")) for c in dec.connections} == {("kafka", True),
                                                                                         ("other", False)}
