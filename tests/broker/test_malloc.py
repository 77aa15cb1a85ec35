"""glibc malloc thresholds: set by ``kwire broker`` (a process that is only a broker), never by
the embedded broker, and never over what the environment already chose."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from kwire.broker import malloc
from kwire.cli import broker_cmd

GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc") if hasattr(os, "confstr") else False


def _in_subprocess(env: dict[str, str]) -> str:
    # A child process: the test runner's own allocator stays as it is.
    code = "from kwire.broker.malloc import tune_malloc; print(tune_malloc())"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_thresholds_are_set_on_glibc_unless_the_environment_sets_them():
    assert _in_subprocess({}) == "True"
    assert _in_subprocess({"MALLOC_TOP_PAD_": "1048576"}) == "False"
    assert _in_subprocess({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}) == "False"


def test_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(malloc, "_is_glibc", lambda: False)
    assert malloc.tune_malloc() is False


def test_kwire_broker_tunes_malloc_and_the_embedded_broker_does_not(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(broker_cmd, "tune_malloc", lambda: calls.append("tuned"))

    async def serve(config, as_json):
        calls.append("served")
        return 0

    monkeypatch.setattr(broker_cmd, "_serve", serve)
    parser = argparse.ArgumentParser()
    broker_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["broker", "--data-dir", str(tmp_path / "d"), "--port", "0"])
    assert args.func(args) == 0
    assert calls == ["tuned", "served"]  # before the broker starts

    def refuse():
        raise AssertionError("the embedded broker changed its host's malloc settings")

    monkeypatch.setattr(malloc, "_is_glibc", refuse)  # what tune_malloc asks first, however it is imported
    from kwire.broker import EmbeddedBroker

    with EmbeddedBroker(tmp_path / "e") as broker:
        assert broker.port
