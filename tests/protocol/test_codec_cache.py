"""The compiled codecs' code objects kept on disk (``compiler._compiled``): a process reads what an
earlier one compiled instead of compiling the generated source again, and a missing, damaged or
unwritable cache only means compiling."""

from __future__ import annotations

import sys

import pytest

from kwire.protocol import compiler, messages
from kwire.protocol.compiler import Codec


def _codec() -> Codec:
    # A fresh Codec (not compiler.codec's process-wide cache), as a new process would make.
    return Codec(messages.MetadataResponse.SPEC, 12)


def _roundtrip(c: Codec) -> None:
    response = messages.MetadataResponse(throttle_time_ms=7, cluster_id="c1", controller_id=1)
    data = bytes(c.encode(response))
    decoded, end = c.decode(data)
    assert end == len(data) and decoded == response


def _refuse_compile(*_args, **_kwargs):
    raise AssertionError("compiled although the cache holds the code")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "_CODEC_CACHE", str(tmp_path / "codecs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "codecs"


def test_a_second_codec_reads_the_first_ones_code(cache_dir, monkeypatch):
    first = _codec()
    written = sorted(cache_dir.iterdir())
    assert len(written) == 1 and written[0].name.endswith(f".{sys.implementation.cache_tag}-{sys.hexversion:x}.code")
    monkeypatch.setattr(compiler, "compile", _refuse_compile, raising=False)
    second = _codec()
    assert second.source == first.source
    _roundtrip(second)


def test_a_damaged_file_is_compiled_again(cache_dir):
    _codec()
    (path,) = cache_dir.iterdir()
    path.write_bytes(b"\xe3not marshal data")
    _roundtrip(_codec())
    path.write_bytes(b"")
    _roundtrip(_codec())


def test_nothing_is_written_without_bytecode_writing(cache_dir, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE, python -B
    _roundtrip(_codec())
    assert not cache_dir.exists()


def test_an_unwritable_place_only_means_compiling(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(compiler, "_CODEC_CACHE", str(blocker / "codecs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    _roundtrip(_codec())


def test_each_variant_has_its_own_code(cache_dir):
    c = _codec()
    c._decoder(record_views=False, null_arrays_as_empty=True)
    assert len(list(cache_dir.iterdir())) == 2


def test_a_file_of_another_source_under_the_same_name_is_not_used(cache_dir):
    # (a CRC-32 names the file: the source kept in it decides)
    import marshal

    _codec()
    (path,) = cache_dir.iterdir()
    path.write_bytes(marshal.dumps(("other source", compile("def dec_x(): pass", "<other>", "exec"))))
    _roundtrip(_codec())
