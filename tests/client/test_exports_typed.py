"""kwire.client's public names are typed: its TYPE_CHECKING imports name each export from the
module __getattr__ loads it from, so a type checker sees what the program gets."""

import ast
import importlib
from pathlib import Path

import kwire.client


def _typed_imports() -> dict[str, str]:
    tree = ast.parse(Path(kwire.client.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING")
    found = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.dump(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name} must be re-exported as itself"
            found[alias.name] = node.module
    return found


def test_every_export_is_typed_from_its_module():
    assert _typed_imports() == kwire.client._EXPORTS


def test_every_export_loads_from_its_module():
    for name, module in kwire.client._EXPORTS.items():
        value = getattr(kwire.client, name)
        assert value is getattr(importlib.import_module(f"kwire.client.{module}"), name)


def test_kwire_typed_names_are_its_all():
    import kwire

    tree = ast.parse(Path(kwire.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING")
    # The re-exports (``X as X``); the block's own imports for annotations (typing's Any) are not names of kwire.
    typed = {alias.asname for node in block.body for alias in node.names if alias.asname}
    assert typed == set(kwire.__all__) - {"__version__"}
    for name in typed:
        assert getattr(kwire, name) is not None
