"""The compiled codecs' code kept on disk (``kwire.protocol.codec``): a process reads what an
earlier one compiled, without writing the source again (``kwire.protocol.compiler`` is not even
used), the constants of the kept code are made again without the message's spec as the writer made
them, a generated class's codec from the cache builds no spec at all, and a missing, damaged, stale (another stamp) or unwritable cache only means compiling."""

from __future__ import annotations

import marshal
import struct
import subprocess
import sys

import pytest

from kwire.protocol import codec as codec_module
from kwire.protocol import compiler, messages
from kwire.protocol._schema import MESSAGES
from kwire.protocol.codec import Codec
from kwire.protocol.errors import UnknownApiVersionError
from kwire.protocol.schema import message_spec


def _codec() -> Codec:
    # A fresh Codec (not codec()'s process-wide cache), as a new process would make.
    return Codec(messages.MetadataResponse.SPEC, 12)


def _roundtrip(c: Codec) -> None:
    response = messages.MetadataResponse(throttle_time_ms=7, cluster_id="c1", controller_id=1,
                                         topics=[messages.MetadataResponse.MetadataResponseTopic(name="t")])
    data = bytes(c.encode(response))
    decoded, end = c.decode(data)
    assert end == len(data) and decoded == response


def _refuse(*_args, **_kwargs):
    raise AssertionError("written or compiled although the cache holds the code")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(codec_module, "_CODEC_CACHE", str(tmp_path / "codecs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "codecs"


def test_a_second_codec_reads_the_first_ones_code_without_the_writer(cache_dir, monkeypatch):
    first = _codec()
    written = sorted(cache_dir.iterdir())
    assert [p.name for p in written] == [f"MetadataResponse-v12.{sys.implementation.cache_tag}-{sys.hexversion:x}.codec"]
    monkeypatch.setattr(codec_module, "compile", _refuse, raising=False)
    monkeypatch.setattr(compiler, "write", _refuse)
    second = _codec()
    assert second.source == first.source
    _roundtrip(second)


def test_a_generated_class_codec_from_the_cache_builds_no_spec(cache_dir, monkeypatch):
    # Message.codec's way (schema_codec): by the message's name, the version checked by the
    # class's MIN_VERSION/MAX_VERSION; on a hit, neither the spec nor the schema is read.
    first = Codec("MetadataResponse", 12)
    monkeypatch.setattr(codec_module, "message_spec", _refuse)
    monkeypatch.setattr(compiler, "write", _refuse)
    second = Codec("MetadataResponse", 12)
    assert second.source == first.source and second._spec is None
    _roundtrip(second)
    with pytest.raises(UnknownApiVersionError, match="no version 99"):
        messages.MetadataResponse.codec(99)


def test_a_warm_cache_leaves_the_schema_unread_in_a_new_process(tmp_path):
    # The start-up path of a client command: every codec it uses from the cache, the 475 KB
    # schema module never imported and no spec built.
    script = """if True:
        import sys
        from kwire.protocol import codec, frames, messages
        codec._CODEC_CACHE = sys.argv[1]
        sys.dont_write_bytecode = False
        request = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="t")])
        for v in (0, 12):
            frame = frames.encode_request(request, v, 7)
            header, decoded = frames.decode_request(frame[4:])
            assert decoded == request, (v, decoded)
        response = messages.ProduceResponse(responses=[messages.ProduceResponse.TopicProduceResponse(name="t")])
        assert messages.ProduceResponse.decode(response.encode(11), 11) == response
        print("_schema" in " ".join(sys.modules))
    """
    run = [sys.executable, "-c", script, str(tmp_path / "codecs")]
    first = subprocess.run(run, capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["True"], first.stderr  # (compiled: the schema read)
    second = subprocess.run(run, capture_output=True, text=True, check=True)
    assert second.stdout.split() == ["False"], second.stderr


def test_a_damaged_file_is_compiled_again(cache_dir):
    _codec()
    (path,) = cache_dir.iterdir()
    path.write_bytes(b"\xe3not marshal data")
    _roundtrip(_codec())
    path.write_bytes(b"")
    _roundtrip(_codec())
    path.write_bytes(marshal.dumps(("a", "tuple", "of", "another", "layout")))
    _roundtrip(_codec())


def test_a_file_of_another_stamp_is_not_used(cache_dir, monkeypatch):
    # The stamp: the mtime and size of the files the source is written from (compiler.py,
    # schema.py, _schema.py, codec.py); an edit of one of them makes every kept codec stale.
    _codec()
    (path,) = cache_dir.iterdir()
    stamp, source, code, recipes, dec, enc = marshal.loads(path.read_bytes())
    path.write_bytes(marshal.dumps((stamp, source, compile("raise AssertionError('stale code ran')", "<x>", "exec"),
                                    recipes, dec, enc)))
    monkeypatch.setattr(codec_module, "_STAMP", (*stamp[:-1], stamp[-1] + 1))  # codec.py one byte longer
    _roundtrip(_codec())


def test_nothing_is_written_without_bytecode_writing(cache_dir, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE, python -B
    _roundtrip(_codec())
    assert not cache_dir.exists()


def test_an_unwritable_place_only_means_compiling(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(codec_module, "_CODEC_CACHE", str(blocker / "codecs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    _roundtrip(_codec())


def test_each_variant_has_its_own_code(cache_dir, monkeypatch):
    c = _codec()
    c._decoder(record_views=False, null_arrays_as_empty=True)
    c._decoder(record_views=True)  # (MetadataResponse has no records: the same code as the base)
    assert len(list(cache_dir.iterdir())) == 3
    monkeypatch.setattr(compiler, "write", _refuse)
    again = _codec()
    assert again._decoder(record_views=True) is again.decode_from
    assert again._decoder(record_views=False, null_arrays_as_empty=True) is not again.decode_from


def test_a_spec_that_is_not_the_schemas_is_not_kept(cache_dir):
    # (its name says nothing of its fields)
    from kwire.protocol.schema import MessageSpec

    spec = MessageSpec({"name": "MetadataResponse", "type": "response", "validVersions": (0, 0),
                        "fields": [{"name": "X", "type": "int32", "versions": (0, 0)}]})
    Codec(spec, 0)
    assert not cache_dir.exists()


def _same_constant(made, written) -> bool:
    if hasattr(written, "__self__") and isinstance(written.__self__, struct.Struct):  # a bound pack/unpack_from
        return (type(made) is type(written) and made.__name__ == written.__name__
                and made.__self__.format == written.__self__.format)
    return type(made) is type(written) and made == written


@pytest.mark.parametrize("kind", ["request", "response", "header", "data"])
def test_recipes_make_the_writers_constants_for_every_message(kind):
    # The constants of kept code are made from recipes, in another process than the one that
    # wrote the source: each must give what the writer put in (same struct format, the same
    # class, an equal default), for every message at its first and last version and variants.
    checked = 0
    for name, d in MESSAGES.items():
        if d["type"] != kind:
            continue
        spec = message_spec(name)
        for version in sorted({spec.min_version, spec.max_version}):
            for views, nulls in ((False, False), (True, False), (False, True)):
                written = compiler.write(spec, version, record_views=views, null_arrays_as_empty=nulls)
                made = codec_module.namespace({n: recipe for n, (_, recipe) in written.constants.items()})
                for n, (value, _) in written.constants.items():
                    assert _same_constant(made[n], value), (name, version, n, made[n], value)
                    checked += 1
    assert checked > 50
