"""No API key or error code spelled as an integer outside ``kwire.protocol`` (issue 25).

API keys are ``ApiKey.X`` (or a message class's ``API_KEY``) and error codes ``ErrorCode.X`` or
an error class's ``code``: a reader sees which API or error is meant, and a search for a name finds
every use.  The scan reads the AST of every module of ``src/kwire`` outside ``kwire.protocol`` and
flags an integer literal only where it is used *as* an api key or an error code, so ordinary
integers (sizes, versions, offsets, other protocols' codes) are left alone:

* a constant named after an API or an error, holding its number (``METADATA = 3``,
  ``API_VERSIONS_KEY = 18``, ``DUPLICATE_SEQUENCE_NUMBER = 46``, also ``PRODUCE, FETCH = 0, 1``);
* a comparison of something named ``api_key`` / ``API_KEY`` / ``error_code`` (or ending so) with
  an integer, or membership of it in a literal of integers (``p.error_code == 0``), or in a
  module constant that is a literal of integers (``RETRY = {14, 15}`` ... ``p.error_code in RETRY``);
* an integer passed where a function takes an api key or an error code (``handler(3)``,
  ``request_class(0)``, ``raise_for_code(6)``, ``api_key=18``, ``error_code=29``);
* an integer key into a table of handlers (``HANDLERS[18]``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from kwire.protocol import ApiKey, ErrorCode

SRC = Path(__file__).resolve().parents[2] / "src" / "kwire"
PROTOCOL = SRC / "protocol"

# Functions whose first argument is an api key, and those whose first argument is an error code.
API_KEY_FUNCTIONS = {"handler", "request_class", "response_class", "api_name", "api_versions",
                     "request_header_version", "response_header_version"}
ERROR_CODE_FUNCTIONS = {"raise_for_code", "for_code", "error_name", "ErrorCode"}
API_KEY_NAMES = ("api_key", "API_KEY")
ERROR_CODE_NAMES = ("error_code",)
SUFFIXES = ("_KEY", "_API", "_CODE", "_ERROR")


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _ints(node: ast.AST) -> list[int] | None:
    """The integers of a literal int (also negative) or a tuple/list/set of them; None otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _ints(node.operand)
        return [-inner[0]] if inner and len(inner) == 1 else None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        values = [_ints(e) for e in node.elts]
        if all(v is not None and len(v) == 1 for v in values):
            return [v[0] for v in values]  # type: ignore[index]
    return None


def _kind(name: str | None) -> str | None:
    if name is None:
        return None
    if name.endswith(API_KEY_NAMES):
        return "api key"
    if name.endswith(ERROR_CODE_NAMES):
        return "error code"
    return None


def _constant_kind(name: str, value: int) -> str | None:
    """'api key' / 'error code' when a constant's name names an API or error and holds its number."""
    stem = name.lstrip("_")
    candidates = [stem] + [stem[: -len(s)] for s in SUFFIXES if stem.endswith(s)]
    for c in candidates:
        if c in ApiKey.__members__ and ApiKey[c] == value:
            return "api key"
        if c in ErrorCode.__members__ and ErrorCode[c] == value:
            return "error code"
    return None


def wire_literals(source: str, filename: str = "<source>") -> list[str]:
    """Each place in ``source`` where an integer stands for an api key or an error code."""
    found: list[str] = []

    def flag(node: ast.AST, what: str, detail: str) -> None:
        found.append(f"{filename}:{node.lineno}: {what} as an integer ({detail})")

    tree = ast.parse(source, filename)
    # Module constants bound to a literal of integers: flagged where compared with an api key or
    # an error code.
    int_tables: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            literal = node.value.args[0] if (isinstance(node.value, ast.Call) and _name_of(node.value.func)
                                             in ("frozenset", "set", "tuple") and node.value.args) else node.value
            if isinstance(literal, (ast.Set, ast.Tuple, ast.List)) and _ints(literal):
                int_tables.update({t.id: literal for t in targets if isinstance(t, ast.Name)})

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = _ints(node.value) if node.value is not None else None
            pairs: list[tuple[ast.AST, int]] = []
            for t in targets:
                if value and len(value) == 1:
                    pairs.append((t, value[0]))
                elif value and isinstance(t, ast.Tuple) and len(t.elts) == len(value):
                    pairs += list(zip(t.elts, value, strict=True))
            for t, v in pairs:
                if isinstance(t, ast.Name) and (kind := _constant_kind(t.id, v)):
                    flag(node, kind, f"{t.id} = {v}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for a, b in zip(sides, sides[1:], strict=False):
                for named, literal in ((a, b), (b, a)):
                    kind = _kind(_name_of(named))
                    if kind and _ints(literal) is not None:
                        flag(node, kind, f"compared with {ast.unparse(literal)}")
                    elif kind and isinstance(literal, ast.Name) and literal.id in int_tables:
                        flag(node, kind, f"compared with {literal.id} = {ast.unparse(int_tables[literal.id])}")
        elif isinstance(node, ast.Call):
            fn = _name_of(node.func)
            if node.args and _ints(node.args[0]) is not None and len(_ints(node.args[0]) or ()) == 1:
                if fn in API_KEY_FUNCTIONS:
                    flag(node, "api key", f"{fn}({ast.unparse(node.args[0])})")
                elif fn in ERROR_CODE_FUNCTIONS:
                    flag(node, "error code", f"{fn}({ast.unparse(node.args[0])})")
            for kw in node.keywords:
                kind = _kind(kw.arg)
                if kind and _ints(kw.value) is not None:
                    flag(node, kind, f"{kw.arg}={ast.unparse(kw.value)}")
        elif isinstance(node, ast.Subscript):
            table = _name_of(node.value)
            if table and "HANDLERS" in table.upper() and _ints(node.slice) is not None:
                flag(node, "api key", f"{table}[{ast.unparse(node.slice)}]")
    return found


def test_the_scan_finds_each_kind_of_wire_literal():
    source = "\n".join([
        "METADATA = 3",
        "API_VERSIONS_KEY = 18",
        "DUPLICATE_SEQUENCE_NUMBER = 46",
        "if p.error_code == 0: pass",
        "if 3 != header.request_api_key: pass",
        "if response.API_KEY in (17, 36): pass",
        "@handler(18, 0, 4)\ndef f(): pass",
        "cls = request_class(0)",
        "raise_for_code(6)",
        "x = Response(error_code=29, api_key=18)",
        "entry = HANDLERS[18]",
        "PRODUCE, FETCH = 0, 1",
        "_REBALANCED = {22, 25, 27}",
        "if p.error_code in _REBALANCED: pass",
    ])
    found = wire_literals(source)
    lines = sorted({int(f.split(":")[1]) for f in found})
    assert lines == [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 15], found


def test_the_scan_leaves_ordinary_integers_alone():
    source = "\n".join([
        "MAX_FRAMES = 20",
        "METADATA = 4",  # a name of an API but not its number
        "LEADER_EPOCH = 0",
        "if version >= 3: pass",
        "if code == 9 and length >= 1: pass",  # pcap option codes
        "x = Response(throttle_time_ms=0, error_code=ErrorCode.NONE, api_key=ApiKey.FETCH)",
        "if p.error_code == ErrorCode.NONE: pass",
        "sizes = {0: 'a', 1: 'b'}",
        "encode(3)",
        "SIZES = (1, 2, 4)",
        "if width in SIZES: pass",
    ])
    assert wire_literals(source) == []


def test_no_api_key_or_error_code_literal_outside_the_protocol_package():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if PROTOCOL in path.parents:
            continue
        found += wire_literals(path.read_text(), str(path.relative_to(SRC.parent)))
    assert not found, "use ApiKey.X / ErrorCode.X (kwire.protocol) instead:\n" + "\n".join(found)
