# Every target builds its own virtual environment first, so each works on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kwire-installed

.PHONY: demo demo-broker test test-fast test-tools lint pytest bench bench-broker generate clean

$(STAMP): pyproject.toml setup.py src/kwire/protocol/records/_layout.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# kwire's main job on the embedded broker: 1,000,000 events produced into an 8-partition topic,
# kwire sink aggregating them into Parquet through Spark, rows in = rows out (needs Java 17).
demo: $(STAMP)
	$(PY) tools/demo_sink.py

# The broker alone: 200k records in with librdkafka, out with a consumer group.
demo-broker: $(STAMP)
	$(PY) tools/demo_broker.py

# Every test, plus the lint and the generated-code drift check.  The Debian tools the tests drive
# (kcat, tcpdump, tshark) are installed first when missing.
test: test-tools lint pytest

# The full suite runs two pytest workers (pytest-xdist), one per core of the 2-core VM: most tests wait
# on sockets, subprocesses and JVMs, so two at a time nearly halve the wall time (serial: ~27 min
# for the full suite).  --dist loadfile keeps each file's tests in one worker, so a file's module
# fixtures start once.  Tests must hold under that doubled load: ports held while a test needs them
# refused (tests/ports.py), waits bounded by what a client is promised, not by a quiet machine.
XDIST = -n 2 --dist loadfile

# The day-to-day tier: everything but the tests marked slow (Spark, kill -9 soaks, see
# tests/conftest.py), and property tests on a quarter of their random examples (hypothesis' "fast"
# profile, tests/tiers.py).  Three workers: what is left waits on real clients more than it
# computes (two workers kept 1.1 of the 2 cores busy, 2026-11-28), so a third fills the gaps.
test-fast: test-tools lint $(STAMP)
	$(PY) -m pytest -q -m "not slow" --hypothesis-profile=fast -n 3 --dist loadfile

test-tools:
	bash tools/ensure_test_tools.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests tools benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

pytest: $(STAMP) test-tools
	$(PY) -m pytest -q --durations=15 $(XDIST)

bench: $(STAMP)
	$(PY) benchmarks/bench_protocol.py

# The broker against librdkafka's mock cluster, both driven by confluent-kafka.
bench-broker: $(STAMP)
	$(PY) benchmarks/bench_broker.py

generate: $(STAMP)
	$(PY) tools/gen_protocol.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis
