"""The broker's page cache limit with a real client: librdkafka writes far more than the limit,
the broker's log files keep about the limit in the page cache, and it all reads back (mostly
from disk) byte for byte."""

from __future__ import annotations

import pytest

from kwire.broker import EmbeddedBroker
from kwire.broker.storage.page_cache import page_cache_control_available

from .clients import check_same, confluent_consume, confluent_consumer, confluent_produce
from .storage.test_page_cache import PAGE, total_resident, wait_until_at_most

LIMIT = 16 << 20  # of ~84 MB written
PARTITIONS = 2


@pytest.mark.skipif(not page_cache_control_available(), reason="sync_file_range and posix_fadvise are Linux calls")
def test_librdkafka_writes_and_reads_back_far_more_than_the_limit(tmp_path):
    n = 80_000  # ~84 MB of values
    recs = [(b"k%d" % i, (b"%08d" % i) * 128, [("n", b"%d" % i)]) for i in range(n)]
    with EmbeddedBroker(tmp_path / "data", default_partitions=PARTITIONS, page_cache_bytes=LIMIT) as broker:
        acked = confluent_produce(broker.bootstrap, "big", recs, **{"batch.size": 256 << 10})
        assert len(acked) == n
        dirs = [tmp_path / "data" / f"big-{p}" for p in range(PARTITIONS)]
        # Beyond the queue, each partition may hold its open run (up to a 1 MiB chunk) and the
        # folio (up to 2 MiB) straddling the end of the last range dropped.
        bound = LIMIT + PARTITIONS * ((3 << 20) + 2 * PAGE)

        def resident() -> int:
            return sum(total_resident(d) for d in dirs)

        wait_until_at_most(resident, bound, "the written log in the page cache")
        consumer = confluent_consumer(broker.bootstrap, "g", ["big"], **{"fetch.max.bytes": 1 << 20})
        try:
            got = confluent_consume(consumer, n, timeout=60)
        finally:
            consumer.close()
        check_same(recs, got)
