"""The Python API as a user finds it: ``dir(kwire)`` lists the public classes, and every public
class, method and property under those names has a docstring that ``help()`` shows."""

from __future__ import annotations

import inspect

import pytest

import kwire
from kwire.client import __all__ as client_names


def _public_members(cls: type) -> list[tuple[str, object]]:
    """What a class itself defines in public (inherited members are their own class's concern)."""
    return [(name, value) for name, value in vars(cls).items() if not name.startswith("_")]


def test_dir_lists_the_public_names_and_nothing_else():
    names = dir(kwire)
    assert {"Producer", "Consumer", "Admin", "AsyncProducer", "AsyncConsumer", "AsyncAdmin", "EmbeddedBroker",
            "TopicPartition", "ClientError", "__version__"} <= set(names)
    assert set(client_names) <= set(names)
    assert not {"Any", "annotations", "importlib"} & set(names)
    for name in names:
        if name != "__version__":
            assert getattr(kwire, name) is not None, name


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Prodcer'"):
        kwire.Prodcer  # noqa: B018


@pytest.mark.parametrize("name", [n for n in dir(kwire) if n != "__version__"])
def test_every_public_name_and_member_has_a_docstring(name):
    obj = getattr(kwire, name)
    assert (obj.__doc__ or "").strip(), f"kwire.{name} has no docstring"
    # (a dataclass without one gets its signature as __doc__: not a docstring anybody wrote)
    assert not obj.__doc__.startswith(f"{getattr(obj, '__name__', '')}("), f"kwire.{name} has no docstring"
    if not inspect.isclass(obj) or issubclass(obj, BaseException):
        return
    undocumented = []
    for member, value in _public_members(obj):
        target = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if callable(target) and not (getattr(target, "__doc__", None) or "").strip():
            undocumented.append(member)
    assert not undocumented, f"kwire.{name}: no docstring on {undocumented}"


def test_kwire_ships_its_type_hints():
    """PEP 561: without the py.typed marker in the package (and in the wheel's package data),
    other projects' type checkers treat kwire as untyped and see none of its hints."""
    import importlib.resources
    from pathlib import Path

    assert importlib.resources.files("kwire").joinpath("py.typed").is_file()
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '[tool.setuptools.package-data]\nkwire = ["py.typed"]' in pyproject


def _client_modules_public_classes() -> list[tuple[str, type]]:
    import importlib
    import pkgutil

    import kwire.client

    found = []
    for info in pkgutil.walk_packages(kwire.client.__path__, "kwire.client."):
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                found.append((f"{info.name}.{name}", obj))
    return found


def test_every_public_class_of_the_client_modules_has_a_docstring_of_its_own():
    # What the client's public calls return (admin results, configs, assignors) is public too,
    # whether or not kwire's top level names it.
    classes = _client_modules_public_classes()
    assert len(classes) > 50
    missing = [name for name, cls in classes
               if not (cls.__doc__ or "").strip() or cls.__doc__.startswith(f"{cls.__name__}(")]
    assert not missing, missing
