"""``kwire analyze`` as users run it: a subprocess over the DeepFlow captures and hostile files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from kwire.analyze.packets import ACK, PSH
from kwire.analyze.pcapwrite import PcapWriter, TcpConversation
from kwire.cli.main import main
from kwire.protocol import encode_request, encode_response, messages
from tests.analyze.helpers import DEEPFLOW, TS0

KWIRE = [sys.executable, "-m", "kwire.cli.main", "analyze"]
CAPTURES = [str(p) for p in sorted((DEEPFLOW / "kafka").glob("*.pcap")) + sorted((DEEPFLOW / "mongo").glob("*.pcap"))]
PRODUCE_V2 = str(DEEPFLOW / "kafka" / "00-produce-v2.pcap")


def kwire(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*KWIRE, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "COLUMNS": "100"})


def exchanges_line(summary: str) -> int:
    """N of the summary's 'Exchanges: N (...)' line."""
    return int(re.search(r"^Exchanges: (\d+)", summary, re.M).group(1))


def api_names(summary: str) -> set[str]:
    """The API column of the summary's APIS table."""
    lines = summary.split("APIS (latency in ms)\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return {line.split()[1] for line in lines}


def test_summary_of_the_deepflow_captures_names_the_apis():
    result = kwire(*CAPTURES)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert {"Produce", "Fetch", "LeaveGroup", "ApiVersions", "OffsetCommit", "find", "isMaster"} <= api_names(out)
    assert "mongodb" in out and "FINDINGS (" in out
    assert exchanges_line(out) > 0
    assert "console-producer" in out  # a client id, in the connections table
    assert result.stderr == ""  # no progress line into a pipe


def test_json_goes_to_stdout_and_the_summary_to_stderr():
    result = kwire(*CAPTURES, "--json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines)
    assert len(lines) == exchanges_line(result.stderr) > 0
    assert "APIS (latency in ms)" in result.stderr


def test_json_to_a_file_keeps_the_summary_on_stdout(tmp_path):
    out = tmp_path / "ex.jsonl"
    result = kwire(PRODUCE_V2, f"--json={out}")
    assert result.returncode == 0, result.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == exchanges_line(result.stdout) == 1
    assert "Produce" in api_names(result.stdout)


def test_json_never_overwrites_a_capture(tmp_path):
    capture = tmp_path / "a.pcap"
    original = (DEEPFLOW / "kafka" / "00-produce-v2.pcap").read_bytes()
    capture.write_bytes(original)
    result = kwire("--json", str(capture), PRODUCE_V2)
    assert result.returncode == 2
    assert f"--json {capture} is a capture; refusing to overwrite it" in result.stderr
    assert capture.read_bytes() == original
    result = kwire("--json", str(capture))  # took the only capture as its output file
    assert result.returncode == 2 and "--json took" in result.stderr


def test_parquet_tables_are_written(tmp_path):
    result = kwire(*CAPTURES, "--parquet", str(tmp_path / "tables"), "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    tables = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert tables == ["connections", "exchanges", "findings", "group_events", "offset_commits"]
    summary = kwire(*CAPTURES).stdout
    exchanges = pq.read_table(tmp_path / "tables" / "exchanges" / "part-0.parquet")
    assert exchanges.num_rows == exchanges_line(summary)
    assert set(exchanges.column("api").to_pylist()) == api_names(summary)


def test_html_report_is_written(tmp_path):
    report = tmp_path / "report.html"
    result = kwire(*CAPTURES, "--html", str(report))
    assert result.returncode == 0, result.stderr
    text = report.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "<script" not in text


def test_a_missing_file_is_named_and_exits_2(tmp_path):
    missing = tmp_path / "nope.pcap"
    result = kwire(str(missing))
    assert result.returncode == 2
    assert f"{missing}: no such file" in result.stderr
    assert result.stdout == ""


def test_a_file_that_is_not_a_capture_is_named_and_exits_2(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello, not a capture\n")
    result = kwire(str(notes))
    assert result.returncode == 2
    assert str(notes) in result.stderr and "not a pcap or pcapng file" in result.stderr
    assert "no capture could be read" in result.stderr


def test_a_non_capture_among_captures_is_named_and_the_rest_analysed(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello, not a capture\n")
    result = kwire(str(notes), PRODUCE_V2)
    assert result.returncode == 0
    assert str(notes) in result.stderr
    assert "Produce" in api_names(result.stdout)


def garbage_capture(path) -> None:
    """A valid pcap whose Kafka connection carries garbage: a frame that decodes as nothing, a
    forged size, and a hole in the stream."""
    with open(path, "wb") as f:
        conv = TcpConversation(PcapWriter(f), "10.1.1.1", 51000, "10.1.1.2", 9092)
        conv.handshake(TS0)
        conv.send(0, b"\x00\x00\x00\x10" + b"\xee" * 16, TS0 + 10_000)
        conv.send(1, b"\x00\x00\x00\x08" + b"\xdd" * 8, TS0 + 20_000)
        conv.emit(TS0 + 30_000, 0, ACK | PSH, b"\x7f\xff\xff\xff" + b"\xcc" * 60)
        conv.emit(TS0 + 40_000, 0, ACK | PSH, b"\xab" * 40, seq=conv.next_seq[0] + 500)  # 500 bytes never seen
        conv.emit(TS0 + 50_000, 1, ACK, ack=conv.next_seq[0] + 540)
        conv.close(TS0 + 60_000)


def test_garbage_in_a_valid_capture_gives_warnings_not_a_failure(tmp_path):
    garbage = tmp_path / "garbage.pcap"
    garbage_capture(garbage)
    result = kwire(str(garbage), PRODUCE_V2)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(r"^WARNINGS \(\d+: ", result.stdout, re.M)
    assert "garbage.pcap" in result.stdout.split("WARNINGS", 1)[1]
    assert "Produce" in api_names(result.stdout)


def busy_capture(path, exchanges: int) -> None:
    """A valid pcap of one connection with many ApiVersions requests and responses."""
    response = messages.ApiVersionsResponse(api_keys=[
        messages.ApiVersionsResponse.ApiVersion(api_key=key, min_version=0, max_version=9) for key in range(40)])
    with open(path, "wb") as f:
        conv = TcpConversation(PcapWriter(f), "10.2.2.1", 52000, "10.2.2.2", 9092)
        conv.handshake(TS0)
        for cid in range(exchanges):
            ts = TS0 + (cid + 1) * 1_000_000
            conv.send(0, encode_request(messages.ApiVersionsRequest(), 2, cid, "busy"), ts)
            conv.send(1, encode_response(response, 2, cid), ts + 200_000)
        conv.close(TS0 + (exchanges + 2) * 1_000_000)


def test_a_reader_closing_the_json_pipe_early_is_not_an_error(tmp_path):
    busy = tmp_path / "busy.pcap"
    busy_capture(busy, 2000)  # JSON lines well beyond a pipe's buffer
    with subprocess.Popen([*KWIRE, str(busy), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()  # as `| head -1` does
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert json.loads(first)["api"] == "ApiVersions"
    assert code == 0
    assert "Traceback" not in err and "busy.pcap: Broken pipe" not in err


def test_bad_arguments_exit_2(capsys):
    # In process: argparse's own errors exit with SystemExit(2).
    for bad in (["--kafka-port", "70000"], ["--slow-ms", "-5"], ["--max-frame-size", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["analyze", PRODUCE_V2, *bad])
        assert exit_info.value.code == 2
    assert main(["analyze"]) == 2
    assert "no capture given" in capsys.readouterr().err
    assert main(["analyze", PRODUCE_V2, "--master", "local[2]"]) == 2
    assert "--master goes with --spark" in capsys.readouterr().err
    assert main(["analyze", PRODUCE_V2, "--html", "/nonexistent-dir/r.html"]) == 2
    assert "directory /nonexistent-dir does not exist" in capsys.readouterr().err


def test_progress_line_shows_bytes_rate_and_is_cleared():
    import io

    from kwire.cli.analyze_cmd import ProgressLine

    stream = io.StringIO()
    progress = ProgressLine(stream)
    progress("big.pcap", 3_000_000, 8_000_000)
    shown = stream.getvalue()
    assert shown.startswith("\rreading big.pcap: 3.0 / 8.0 MB (") and shown.endswith(" MB/s)")
    progress.clear()
    assert stream.getvalue().endswith("\r" + " " * (len(shown) - 1) + "\r")
