"""LogManager's lazy topics: after a clean shutdown their partitions open on first use (the
broker's internal topics, which its coordinators load after start); after a crash they are
recovered at open with the rest."""

from __future__ import annotations

from kwire.broker.storage import LogManager

from .helpers import SMALL, fill, read_all


def _written(tmp_path) -> bytes:
    mgr = LogManager(tmp_path, SMALL)
    mgr.create_partition("__internal", 0)
    mgr.create_partition("__internal", 1)
    mgr.create_partition("data", 0)
    fill(mgr.get("__internal", 1), 10)
    data = read_all(mgr.get("__internal", 1))
    mgr.close()
    return data


def test_after_a_clean_shutdown_lazy_partitions_open_on_first_use(tmp_path):
    data = _written(tmp_path)
    mgr = LogManager(tmp_path, SMALL, lazy_topics={"__internal"})
    try:
        assert mgr.partitions() == [("__internal", 0), ("__internal", 1), ("data", 0)]
        assert mgr.topics() == ["__internal", "data"]
        assert mgr.opened("data", 0)
        assert not mgr.opened("__internal", 0) and not mgr.opened("__internal", 1)
        log = mgr.get("__internal", 1)
        assert mgr.opened("__internal", 1) and mgr.get("__internal", 1) is log
        assert read_all(log) == data
        fill(log, 2)  # written like any partition from then on
        assert mgr.create_partition("__internal", 0, exist_ok=True) is mgr.get("__internal", 0)
    finally:
        mgr.close()
    # A partition never opened is as it was: the next start finds it (clean again).
    mgr = LogManager(tmp_path, SMALL, lazy_topics={"__internal"})
    try:
        assert mgr.clean_shutdown and len(read_all(mgr.get("__internal", 1))) > len(data)
    finally:
        mgr.close()


def test_after_a_crash_lazy_partitions_are_recovered_at_open(tmp_path):
    data = _written(tmp_path)
    LogManager(tmp_path, SMALL).close(clean=False)  # the marker gone: the next open recovers
    mgr = LogManager(tmp_path, SMALL, lazy_topics={"__internal"})
    try:
        assert not mgr.clean_shutdown
        assert mgr.opened("__internal", 0) and mgr.opened("__internal", 1)
        assert read_all(mgr.get("__internal", 1)) == data
    finally:
        mgr.close()


def test_a_lazy_topic_can_be_deleted_unopened(tmp_path):
    _written(tmp_path)
    mgr = LogManager(tmp_path, SMALL, lazy_topics={"__internal"})
    try:
        assert mgr.delete_topic("__internal") == [0, 1]
        assert mgr.partitions() == [("data", 0)]
        assert not any(p.name.startswith("__internal") for p in tmp_path.iterdir())
    finally:
        mgr.close()
