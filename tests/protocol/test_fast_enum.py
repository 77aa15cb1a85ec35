"""The generated ``ErrorCode`` and ``ApiKey`` (``kwire.protocol.fast_enum``): made by
``enum._simple_enum`` where Python has it, they are the IntEnums the class statement makes, the
same in every way a user sees (and on a Python without it, made by the class statement)."""

from __future__ import annotations

import enum
import importlib.util
import pickle
from enum import IntEnum
from types import ModuleType

import pytest

from kwire.protocol.errors import ErrorCode, KafkaError, NotCoordinatorError
from kwire.protocol.generated.api_keys import API_INFO, ApiKey


def _made_by_class_statement(module_name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The generated module run again (not registered) on a Python without ``_simple_enum``."""
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with monkeypatch.context() as m:
        m.delattr(enum, "_simple_enum", raising=False)
        spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not hasattr(enum, "_simple_enum"), reason="this Python makes them by the class statement")
@pytest.mark.parametrize(("module_name", "made"), [("kwire.protocol.generated.error_codes", ErrorCode),
                                                   ("kwire.protocol.generated.api_keys", ApiKey)])
def test_the_fast_enum_is_the_class_statements(module_name, made, monkeypatch):
    reference = getattr(_made_by_class_statement(module_name, monkeypatch), made.__name__)
    assert type(reference) is enum.EnumMeta and reference is not made
    # The standard library's own check of a _simple_enum against its class-statement twin:
    # members, values, names, docstrings, methods and attributes of the class and every member.
    enum._test_simple_enum(reference, made)


@pytest.mark.parametrize("fast", [True, False])
def test_error_code_behaves_as_an_int_enum(fast, monkeypatch):
    codes = ErrorCode if fast else _made_by_class_statement("kwire.protocol.generated.error_codes",
                                                           monkeypatch).ErrorCode
    assert issubclass(codes, IntEnum) and isinstance(codes.NONE, int)
    assert codes(16) is codes.NOT_COORDINATOR and codes["NONE"] is codes(0) and codes(-1).name == "UNKNOWN_SERVER_ERROR"
    assert codes.NOT_COORDINATOR == 16 and hash(codes.NOT_COORDINATOR) == hash(16)
    assert repr(codes.NOT_COORDINATOR) == "<ErrorCode.NOT_COORDINATOR: 16>"
    assert (str(codes.NOT_COORDINATOR), format(codes.NOT_COORDINATOR), f"{codes.NOT_COORDINATOR:>4}") == ("16", "16", "  16")
    assert codes.NOT_COORDINATOR.retriable and not codes.NONE.retriable
    assert codes.NOT_COORDINATOR.message == "not coordinator"
    assert [c.value for c in codes][:3] == [-1, 0, 1] and len(codes) == len(list(codes)) > 130
    with pytest.raises(ValueError):
        codes(100000)
    with pytest.raises(KeyError):
        codes["NOT_A_CODE"]


def test_members_pickle_to_themselves():
    for member in (ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR, ApiKey.METADATA):
        assert pickle.loads(pickle.dumps(member)) is member
    assert pickle.loads(pickle.dumps(NotCoordinatorError("x"))).code is ErrorCode.NOT_COORDINATOR


def test_the_tables_keyed_by_members():
    assert API_INFO[ApiKey.METADATA].key is ApiKey.METADATA and API_INFO[3].name == "Metadata"
    assert KafkaError.for_code(16) is NotCoordinatorError and NotCoordinatorError.code is ErrorCode.NOT_COORDINATOR
