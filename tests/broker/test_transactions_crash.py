"""kill -9 of a broker holding committed, aborted and open transactions (the broker runs as a
subprocess, as in test_crash.py): after the restart the aborted-transaction index is back (rebuilt
by recovery, and from the log where its file was deleted), the open transaction still holds the
LSO, and its producer commits it."""

from __future__ import annotations

import signal

import confluent_kafka

from kwire.broker.storage import AbortedTxn, LogManager

from .clients import confluent_read_all
from .test_crash import _free_port, _start
from .test_transactions_clients import QUIET


def test_kill_9_keeps_transactions_and_rebuilds_the_txn_index(tmp_path):
    data, port = tmp_path / "data", _free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = _start(data, port)
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-1",
                                             "linger.ms": 1, "transaction.timeout.ms": 60000, **QUIET})
        producer.init_transactions(15)
        for kind in ("commit", "abort", "open"):
            producer.begin_transaction()
            for i in range(4):
                producer.produce("crash", value=b"%s-%d" % (kind.encode(), i), partition=i % 2)
            if kind == "commit":
                producer.commit_transaction(15)
            elif kind == "abort":
                assert producer.flush(15) == 0
                producer.abort_transaction(15)
            else:
                assert producer.flush(15) == 0
        committed = [(i % 2, b"commit-%d" % i) for i in range(4)]
        assert sorted(confluent_read_all(bootstrap, "crash", "read_committed", partitions=2)) == sorted(committed)

        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        lost = sorted((data / "crash-0").glob("*.txnindex"))
        assert lost and lost[0].stat().st_size == 34          # the abort's entry
        for path in lost:
            path.unlink()
        proc = _start(data, port)

        # The aborted records stay hidden (partition 0's index rebuilt from the log), the open
        # transaction still holds the LSO after the crash.
        assert sorted(confluent_read_all(bootstrap, "crash", "read_committed", partitions=2)) == sorted(committed)
        assert len(confluent_read_all(bootstrap, "crash", "read_uncommitted", partitions=2)) == 12
        producer.commit_transaction(30)
        opened = [(i % 2, b"open-%d" % i) for i in range(4)]
        assert sorted(confluent_read_all(bootstrap, "crash", "read_committed", partitions=2)) == sorted(
            committed + opened)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err

    assert lost[0].exists()                                   # made again, with its entry (below)
    with LogManager(data) as logs:
        for partition in (0, 1):
            log = logs.get("crash", partition)
            # commit-0,1 | commit marker | abort-0,1 | abort marker | open-0,1 | commit marker
            assert [s.txn_index.entries for s in log.segments] == [[AbortedTxn(0, 3, 5, 6)]]
            assert log.last_stable_offset == log.high_watermark == 9
