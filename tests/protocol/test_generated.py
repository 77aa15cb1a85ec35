"""The committed schema and generated source must be exactly what the generator makes from ../shared,
and the generated classes, enums and API facts must agree with the schema and Kafka's rules."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "kafka-protocol"


def test_generated_schema_matches_kafka_definitions():
    assert SHARED.is_dir(), f"Kafka's message definitions are expected at {SHARED}"
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_union_of_versions_spans_v0_to_kafka_4_3():
    from kwire.protocol import api_versions

    # Oldest versions come from the full-history set, newest from Kafka 4.3 (KIP-896 raised minima).
    assert api_versions(0) == (0, 13)  # Produce
    assert api_versions(1) == (0, 18)  # Fetch
    assert api_versions(3) == (0, 13)  # Metadata
    assert api_versions(74)[1] >= 1  # ListConfigResources, renamed in 4.x from ListClientMetricsResources


def test_generator_detects_a_drifted_module(tmp_path):
    stale = tmp_path / "_schema.py"
    stale.write_text("MESSAGES = {}\n")
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check",
                             "--output", str(stale)], capture_output=True, text=True)
    assert result.returncode == 1
    assert "out of date" in result.stderr


def test_every_message_class_is_generated_source_matching_its_schema():
    import inspect

    from kwire.protocol.generated import MESSAGE_MODULES
    from kwire.protocol.messages import message_class
    from kwire.protocol.schema import message_spec

    for name, module in MESSAGE_MODULES.items():
        cls = message_class(name)
        assert cls.__module__ == f"kwire.protocol.generated.{module}"
        assert inspect.getsourcefile(cls).endswith(f"generated/{module}.py")  # source, not exec
        spec = message_spec(name)
        assert (cls.MIN_VERSION, cls.MAX_VERSION) == spec.valid
        for struct in spec.struct.walk():
            sub = struct.python_class()
            attrs = tuple(f.attr for f in struct.fields)
            assert sub._attrs == attrs, f"{name}.{struct.name}"
            assert sub.__slots__ == (*attrs, "unknown_tags")
            params = list(inspect.signature(sub.__init__).parameters)[1:]
            assert params == [*attrs, "unknown_tags"], f"{name}.{struct.name}"
            sub()  # every field has a default


def test_api_info_header_versions_follow_kafkas_rules():
    from kwire.protocol import API_INFO, ApiKey, request_class, response_class

    assert len(API_INFO) == len(ApiKey)
    for key, info in API_INFO.items():
        req, resp = request_class(key), response_class(key)
        assert (info.key, info.min_version, info.max_version) == (key, req.MIN_VERSION, req.MAX_VERSION)
        for v in range(info.min_version, info.max_version + 1):
            rh = [h for lo, hi, h in info.request_header_versions if lo <= v <= hi]
            sh = [h for lo, hi, h in info.response_header_versions if lo <= v <= hi]
            # Flexible versions carry request header v2 / response header v1 (KIP-482), except
            # ControlledShutdown v0 (header v0) and ApiVersions responses (always v0, KIP-511).
            expect_rh = 0 if (key, v) == (ApiKey.CONTROLLED_SHUTDOWN, 0) else 2 if req.is_flexible(v) else 1
            expect_sh = 0 if key == ApiKey.API_VERSIONS else 1 if resp.is_flexible(v) else 0
            assert (rh, sh) == ([expect_rh], [expect_sh]), f"{info.name} v{v}"


def test_error_codes_enum_matches_kafkas_table():
    import json

    from kwire.protocol import ErrorCode, KafkaError

    table = json.loads((SHARED / "error_codes.json").read_text())
    # Kafka 4.x codes the shared 4.0 table lacks (tools/kafka-protocol-extra/error_codes.json).
    table += json.loads((ROOT / "tools" / "kafka-protocol-extra" / "error_codes.json").read_text())
    assert ErrorCode.STREAMS_INVALID_TOPOLOGY == 130
    assert [(int(c), c.name, c.retriable) for c in ErrorCode] == [(e["code"], e["name"], e["retriable"])
                                                                  for e in table]
    assert ErrorCode.NOT_COORDINATOR.message == "not coordinator"
    for code in ErrorCode:
        if code:
            assert KafkaError.for_code(code).code == code
