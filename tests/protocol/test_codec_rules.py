"""Kafka's encoding rules that are not plain round trips."""

import pytest

from kwire.protocol import EncodeError, decode_request, encode_request, messages
from kwire.protocol.messages import message_class
from kwire.protocol.schema import message_spec


def test_controlled_shutdown_v0_uses_request_header_v0():
    # Header v0 is api key, api version, correlation id: no client id.
    req = messages.ControlledShutdownRequest(broker_id=3)
    frame = encode_request(req, 0, correlation_id=9, client_id="ignored-in-v0")
    assert frame == bytes.fromhex("0000000c" "0007" "0000" "00000009" "00000003")
    header, decoded = decode_request(frame[4:])
    assert header.correlation_id == 9 and decoded.broker_id == 3


def test_unknown_tags_cannot_ride_on_a_version_without_tagged_fields():
    req = messages.MetadataRequest(unknown_tags={7: b"\x01"})
    assert messages.MetadataRequest.decode(req.encode(9), 9).unknown_tags == {7: b"\x01"}
    with pytest.raises(EncodeError, match="no tagged fields"):
        req.encode(8)


def test_unknown_tag_that_collides_with_a_known_field_is_refused():
    # FetchRequest v12+ knows tag 0 (ClusterId) and tag 1 (ReplicaState).
    req = messages.FetchRequest(unknown_tags={0: b"\x00"})
    with pytest.raises(EncodeError, match="tag of a known field"):
        req.encode(12)
    assert messages.FetchRequest.decode(messages.FetchRequest(unknown_tags={5: b"x"}).encode(12), 12).unknown_tags == {
        5: b"x"}


def test_every_tag_in_the_schema_is_an_integer():
    from kwire.protocol._schema import MESSAGES

    for name in MESSAGES:
        for struct in message_spec(name).struct.walk():
            for f in struct.fields:
                assert f.tag is None or type(f.tag) is int, (name, struct.name, f.name, f.tag)


def test_tagged_fields_are_written_only_when_not_default():
    cls = message_class("FetchRequest")
    plain = cls().encode(12)
    with_cluster = cls(cluster_id="c1").encode(12)
    assert len(with_cluster) > len(plain)
    assert cls.decode(with_cluster, 12).cluster_id == "c1"
    assert cls.decode(plain, 12).cluster_id is None
