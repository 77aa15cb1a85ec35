"""The committed schema module must be exactly what the generator makes from ../shared."""

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
