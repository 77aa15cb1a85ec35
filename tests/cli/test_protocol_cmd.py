"""``kwire protocol list|show|decode``."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kwire.cli.main import main
from kwire.protocol import encode_request, encode_response, messages


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_names_every_api_with_its_versions(capsys):
    code, out, _ = run(capsys, "protocol", "list", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["Produce"]["api_key"] == 0 and rows["Produce"]["min_version"] == 0
    assert rows["Produce"]["max_version"] == 13
    assert rows["Fetch"]["max_version"] == 18
    assert rows["ApiVersions"]["flexible_versions"] == "3+"
    assert len(rows) >= 88


def test_list_table_is_aligned(capsys):
    code, out, _ = run(capsys, "protocol", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["KEY", "NAME", "MIN", "MAX", "FLEXIBLE"]
    assert any(line.split()[:2] == ["3", "Metadata"] for line in lines[2:])


def test_show_one_version_gives_wire_types(capsys):
    code, out, _ = run(capsys, "protocol", "show", "Metadata", "--version", "1", "--json")
    assert code == 0
    shown = json.loads(out)
    req = {f["field"]: f["type"] for f in shown["request"]["fields"]}
    assert req == {"Topics": "NULLABLE_ARRAY[MetadataRequestTopic]", "Name": "STRING"}
    resp = [f["field"] for f in shown["response"]["fields"]]
    assert "ControllerId" in resp and "ClusterId" not in resp  # ClusterId arrived in v2
    assert shown["request"]["header_version"] == 1 and shown["response"]["header_version"] == 0


def test_show_flexible_version_uses_compact_types_and_tags(capsys):
    code, out, _ = run(capsys, "protocol", "show", "fetch", "-v", "17", "--json")
    fields = {f["field"]: f for f in json.loads(out)["request"]["fields"]}
    assert fields["Topics"]["type"] == "COMPACT_ARRAY[FetchTopic]"
    assert "tagged field 0" in fields["ClusterId"]["notes"]


def test_show_unknown_api_and_version_fail_clearly(capsys):
    code, _, err = run(capsys, "protocol", "show", "NoSuchApi")
    assert code == 2 and "no API named 'NoSuchApi'" in err
    code, _, err = run(capsys, "protocol", "show", "Metadata", "--version", "99")
    assert code == 2 and "no version 99" in err


def test_decode_request_frame(capsys):
    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="orders")])
    frame = encode_request(req, 12, correlation_id=42, client_id="tester")
    code, out, _ = run(capsys, "protocol", "decode", "--hex", frame.hex(), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["api"] == "Metadata" and doc["api_version"] == 12
    assert doc["header"]["correlation_id"] == 42 and doc["header"]["client_id"] == "tester"
    assert doc["body"]["topics"][0]["name"] == "orders"


def test_decode_response_needs_api_and_version(capsys):
    resp = messages.ApiVersionsResponse(api_keys=[messages.ApiVersionsResponse.ApiVersion(api_key=3, max_version=12)])
    frame = encode_response(resp, 3, correlation_id=9)
    code, _, err = run(capsys, "protocol", "decode", "--hex", frame.hex(), "--response")
    assert code == 2 and "--api and --version" in err
    spaced = " ".join(frame[i:i + 1].hex() for i in range(len(frame)))
    code, out, _ = run(capsys, "protocol", "decode", "--hex", spaced, "--response", "--api", "ApiVersions", "-v", "3")
    doc = json.loads(out)
    assert code == 0 and doc["header"]["correlation_id"] == 9
    assert doc["body"]["api_keys"][0]["max_version"] == 12


def test_decode_garbage_names_the_problem(capsys):
    code, _, err = run(capsys, "protocol", "decode", "--hex", "0003000c0000")
    assert code == 1 and "cannot decode" in err
    code, _, err = run(capsys, "protocol", "decode", "--hex", "zz")
    assert code == 2 and "not valid hexadecimal" in err


def test_decode_truncated_request_names_api_and_field(capsys):
    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="orders")])
    frame = encode_request(req, 4, correlation_id=1)[4:-3]
    code, _, err = run(capsys, "protocol", "decode", "--hex", frame.hex())
    assert code == 1
    assert "MetadataRequest v4" in err and "topics" in err


@pytest.mark.parametrize("argv", [["--help"], ["protocol", "--help"], ["protocol", "list", "--help"],
                                  ["protocol", "show", "--help"], ["protocol", "decode", "--help"]])
def test_every_command_has_help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert "usage: kwire" in capsys.readouterr().out


def test_console_script_is_installed():
    # Beside the interpreter running the tests (make test does not activate the venv), else on PATH.
    beside = Path(sys.executable).parent / "kwire"
    exe = str(beside) if beside.exists() else shutil.which("kwire")
    assert exe, "the kwire console script is not on PATH (pip install -e . creates it)"
    result = subprocess.run([exe, "protocol", "list", "--json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert any(r["name"] == "ApiVersions" for r in json.loads(result.stdout))


def test_decode_records_expands_batches(capsys):
    from kwire.protocol.records import Compression, RecordBatchBuilder

    builder = RecordBatchBuilder(compression=Compression.LZ4)
    builder.append(b"k1", b"hello", 1_700_000_000_000, [("h", b"v")])
    builder.append(None, b"\xff\x00", 1_700_000_000_001)
    produce = messages.ProduceRequest
    topic = produce.TopicProduceData
    req = produce(acks=-1, timeout_ms=1000, topic_data=[
        topic(name="orders", partition_data=[topic.PartitionProduceData(index=0, records=builder.build())])])
    frame = encode_request(req, 9, correlation_id=3)
    code, out, _ = run(capsys, "protocol", "decode", "--hex", frame.hex(), "--records", "--json")
    assert code == 0
    batches = json.loads(out)["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert batches[0]["record_count"] == 2 and batches[0]["attributes"] & 7 == Compression.LZ4
    assert [(r["key"], r["value"]) for r in batches[0]["records"]] == [("k1", "hello"), (None, "0xff00")]
    assert batches[0]["records"][0]["headers"] == [["h", "v"]]
    # Without --records the record set stays hex.
    code, out, _ = run(capsys, "protocol", "decode", "--hex", frame.hex(), "--json")
    hexed = json.loads(out)["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(hexed, str) and bytes.fromhex(hexed) == builder.build()
