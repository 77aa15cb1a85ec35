"""Shared pytest hooks, and the test tiers.

``make test`` runs everything (CI's gate).  ``make test-fast`` leaves out the tests marked
``slow``: every test that starts Spark (a JVM per module, minutes in all) and the few others
marked by hand because they take many seconds each (kill -9 soaks, rebalances on the mock).
It also loads hypothesis' ``fast`` profile (tests/tiers.py): property tests draw fewer examples.
"""

import sys
from pathlib import Path

import pytest

# Registers hypothesis' "fast" profile before hypothesis' plugin loads the one named by
# --hypothesis-profile (in pytest_configure, after the initial conftest files are imported).
import tests.tiers  # noqa: F401

_SPARK_DIR = Path(__file__).parent / "spark"

# Tests left to ``make test`` by hand (node ids, without parameters unless given): each takes many
# seconds of real clients, real processes or real-time waits, and a sibling that stays in the
# day-to-day tier covers its area.  Why, and which sibling:
SLOW_BY_HAND = {
    # kill -9 and restart of a broker process; tests/client/test_transactions_crash.py stays
    "tests/broker/test_transactions_crash.py::test_kill_9_keeps_transactions_and_rebuilds_the_txn_index",
    # a worker process killed and the clean retried; ..._killed_mid_clean_fails_that_clean... stays
    "tests/broker/storage/test_cleaner_worker.py::test_the_cleaner_retries_a_log_whose_worker_was_killed",
    # three real-time redeliveries of a share group; the file's other share-consumer tests stay
    "tests/broker/test_share_group_clients.py::test_the_delivery_count_limit_archives_a_poison_record",
    # a second client library throttled under a quota; the confluent-kafka quota tests stay
    "tests/broker/test_client_quotas_clients.py::test_kafka_python_producer_over_its_quota_gets_every_record_stored",
    # three clients refused per case; the wrong-password case stays
    "tests/broker/test_security_clients.py::test_wrong_credentials_are_refused_by_every_client[unknown-user]",
    # librdkafka reconnecting under tcpdump until 15 connections; the normal-traffic capture stays
    "tests/analyze/test_real_captures.py::test_a_client_reconnecting_in_a_loop_is_a_reconnect_storm",
    # a real-clients capture rendered in Chromium; the years-apart report in Chromium stays
    "tests/analyze/test_report_browser.py::test_the_report_of_real_client_traffic_in_chromium",
    # two more clients reading a compacted topic; confluent-kafka's run stays
    "tests/broker/test_compaction_clients.py::"
    "test_each_client_reads_the_latest_value_of_every_live_key_after_cleaning[kafka-python]",
    "tests/broker/test_compaction_clients.py::"
    "test_each_client_reads_the_latest_value_of_every_live_key_after_cleaning[aiokafka]",
    # the drift check's own test (a generator run into a temp dir); the drift check itself stays
    "tests/protocol/test_generated.py::test_generator_detects_a_drifted_module",
    # a big capture decoded to watch memory; test_streams' other decoding tests stay
    "tests/analyze/test_streams.py::test_memory_stays_bounded_on_a_big_capture",
    # two plain random histories of the cleaner; seed 0 and the regression seeds 11, 13, 19 stay
    "tests/broker/storage/test_cleaner.py::test_random_histories_keep_each_keys_last_record[1]",
    "tests/broker/storage/test_cleaner.py::test_random_histories_keep_each_keys_last_record[2]",
    # three more random histories cleaned in a worker process; seed 0 stays
    *(f"tests/broker/storage/test_cleaner_worker.py::test_a_clean_in_the_worker_leaves_the_same_log_as_in_the_thread"
      f"[{seed}]" for seed in (1, 2, 3)),
}


def pytest_collection_modifyitems(config, items):
    """Mark as slow what starts Spark: tests/spark/ (some start it in a subprocess), and any
    test that uses a ``spark`` session fixture; and the tests in SLOW_BY_HAND."""
    slow = pytest.mark.slow
    for item in items:
        path = Path(str(item.fspath))
        if _SPARK_DIR in path.parents or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(slow)
        elif item.nodeid in SLOW_BY_HAND or item.nodeid.partition("[")[0] in SLOW_BY_HAND:
            item.add_marker(slow)
    _largest_files_first(items)


def _largest_files_first(items) -> None:
    """Order the files by their number of tests, most first (each file's own order kept).

    pytest-xdist's --dist loadfile hands out whole files in collection order; in path order the
    codec's sweeps (thousands of tests, minutes each file) come last, and one worker runs the last
    of them while the other has nothing left.  Started first, they leave the short files to
    even out the two workers' ends."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.nodeid.partition("::")[0]] = counts.get(item.nodeid.partition("::")[0], 0) + 1
    items.sort(key=lambda item: -counts[item.nodeid.partition("::")[0]])


def pytest_terminal_summary(terminalreporter):
    """Show how much of the protocol the kafka-python oracle covered, when it ran."""
    oracle = sys.modules.get("tests.protocol.test_codec_oracle")
    if oracle is not None:
        terminalreporter.write_line(oracle.SUMMARY)
