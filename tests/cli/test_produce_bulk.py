"""``kwire produce`` of input larger than one read: every record lands once and in order across
the reads (each read is one ``produce_many`` call), batches are kcat's (librdkafka's batch.size and
batch.num.messages) unless -X says otherwise, a bad line in a later read is numbered from the start
of the input, and records that fail are counted with the first error."""

from __future__ import annotations

import pytest

from kwire.broker import EmbeddedBroker
from kwire.cli import produce_cmd
from kwire.protocol.records import bulk, iter_batches

from .test_produce_cmd import kwire, ok, one_line_error


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(default_partitions=1) as b:
        yield b


@pytest.fixture
def topic(request) -> str:
    return request.node.name.replace("[", "-").replace("]", "")


def stored(broker: EmbeddedBroker, topic: str) -> list:
    """The topic's batches as the broker stored them (its one partition's log files)."""
    directory = broker.data_dir / f"{topic}-0"
    return list(iter_batches(b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))))


def test_input_of_many_reads_lands_in_order_in_kcats_batches(broker, topic, tmp_path):
    lines = [b"%07d" % i + b"." * (i % 50) for i in range(70_000)]   # ~2.3 MB: three reads
    data = tmp_path / "lines.txt"
    data.write_bytes(b"\n".join(lines) + b"\n")
    assert data.stat().st_size > 2 * produce_cmd._READ_SIZE
    out = ok("produce", topic, "-f", str(data), "-b", broker.bootstrap)
    assert "70000 of 70000 records written" in out
    batches = stored(broker, topic)
    assert [r.value for b in batches for r in b] == lines
    limit = produce_cmd.RDKAFKA_BATCHING["batch.num.messages"]
    assert max(b.record_count for b in batches) == limit       # librdkafka's batch.num.messages
    assert max(b.size_in_bytes for b in batches) <= produce_cmd.RDKAFKA_BATCHING["batch.size"]


def test_x_batch_size_replaces_kcats_batching(broker, topic):
    stdin = "".join(f"record {i}\n" for i in range(500))
    ok("produce", topic, "-X", "batch.size=1000", "-b", broker.bootstrap, stdin=stdin)
    batches = stored(broker, topic)
    assert sum(b.record_count for b in batches) == 500
    assert max(b.size_in_bytes for b in batches) <= 1000 and len(batches) >= 8


def test_a_bad_line_in_a_later_read_is_numbered_from_the_start(broker, topic, tmp_path):
    good = [b"k%d:v%d" % (i, i) for i in range(150_000)]             # ~2 MB before the bad line
    data = tmp_path / "keyed.txt"
    data.write_bytes(b"\n".join(good) + b"\nno separator here\nk:v\n")
    result = kwire("produce", topic, "-f", str(data), "-K", ":", "-b", broker.bootstrap)
    assert f"{data}: line 150001 has no key separator ':'" in one_line_error(result)
    assert "the 150000 records before it were sent" in result.stderr
    records = [r for b in stored(broker, topic) for r in b]
    assert [(r.key, r.value) for r in records] == [tuple(g.split(b":")) for g in good]


def test_records_too_large_are_counted_with_the_first_error(broker, topic):
    stdin = "small\n" + "x" * 5000 + "\nsmall again\n" + "y" * 6000 + "\n"
    result = kwire("produce", topic, "-X", "max.request.size=2000", "-b", broker.bootstrap, stdin=stdin)
    line = one_line_error(result)
    assert "2 records failed" in line and "max.request.size (2000)" in line
    assert "2 of 4 records written" in result.stdout
    assert [r.value for b in stored(broker, topic) for r in b] == [b"small", b"small again"]


def test_the_progress_line_counts_deliveries_only_when_it_shows_them(capsys):
    progress = produce_cmd._Progress()
    progress.enabled = True
    asked = []

    def delivered() -> int:
        asked.append(1)
        return 3

    progress.next = float("inf")
    progress.tick(5, delivered)
    assert asked == [] and capsys.readouterr().err == ""
    progress.next = 0
    progress.tick(5, delivered)
    assert asked == [1] and "5 sent, 3 delivered" in capsys.readouterr().err


@pytest.mark.parametrize("in_place", [False, True], ids=["lists", "in-place"])
@pytest.mark.parametrize("delim", [b"\n", b"\x00", b"\r\n", b"--", b"aa"])
@pytest.mark.parametrize("read_size", [1, 2, 3, 5, 7, 64])
def test_records_cut_by_the_end_of_a_read_are_joined(monkeypatch, delim, read_size, in_place):
    # Every way a read can end: inside a record, right after a delimiter, inside a two-byte
    # delimiter, on an empty record; and the input's last record with and without its delimiter.
    # Read in place (kwire produce without -K or -Z) each read's records stay in its buffer.
    # "aa" overlaps itself: records end where bytes.split ends them (from the left).
    import io

    monkeypatch.setattr(produce_cmd, "_READ_SIZE", read_size)
    records = [b"a", b"", b"bcdef", b"+", b"\r", b"", b"ghijklmnopq", b"r"]
    for tail in (delim, b""):
        data = delim.join(records) + tail
        expected = data.split(delim)[:-1] if tail else data.split(delim)
        runs = list(produce_cmd._split(io.BytesIO(data), delim, in_place=in_place))
        got = [r for run in runs for r in run]
        assert got == expected, (data, read_size)
        if in_place and bulk.compiled() and read_size == 64:
            assert type(runs[0]) is bulk.DelimitedValues  # no object per record
