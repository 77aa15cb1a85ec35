"""Every ``from X import name`` written inside a function resolves.

kwire imports lazily inside functions to keep start-up cheap (the CLI, the pytest plugin, the
client's admin helpers), and neither ruff nor an import of the module sees such a line until the
function runs: a rename elsewhere then breaks only the path that reaches it.  This reads every
module under src/kwire and checks each of those names against the module it comes from."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _local_imports():
    for path in sorted((SRC / "kwire").rglob("*.py")):
        if "generated" in path.parts:
            continue
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(parts[:-1] if path.name == "__init__.py" else parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom):
                        yield path, package, sub


def test_every_name_imported_inside_a_function_exists():
    missing = []
    checked = 0
    for path, package, node in _local_imports():
        name = "." * node.level + (node.module or "")
        try:
            target = importlib.import_module(name, package=package if node.level else None)
        except ImportError as exc:
            missing.append(f"{path.relative_to(SRC)}:{node.lineno}: {name}: {exc}")
            continue
        for alias in node.names:
            checked += 1
            if alias.name == "*" or hasattr(target, alias.name):
                continue
            try:  # a submodule not imported yet
                importlib.import_module(f"{target.__name__}.{alias.name}")
            except ImportError:
                missing.append(f"{path.relative_to(SRC)}:{node.lineno}: {alias.name} is not in {target.__name__}")
    assert checked > 100, f"only {checked} names found: the scan is not reading the source"
    assert not missing, "\n".join(missing)
