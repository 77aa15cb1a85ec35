"""Generate kwire's protocol modules from Kafka's message definitions.

Reads the two definition sets in ``../shared/kafka-protocol`` (see its SOURCE.md):
``messages/`` has the full version history up to Kafka 4.0, ``messages-4.3/`` has Kafka 4.3 with
raised minimum versions (KIP-896) and newer maxima.  For every message the newer set is
authoritative for the versions it lists and the older set supplies the versions below them, so
the result speaks every version from v0 to Kafka 4.3.

``coordinator-records/`` adds the key and value schemas of the records Kafka's coordinators write
to their internal topics (``__consumer_offsets``, ``__transaction_state``, ...).  They are "data"
messages like ConsumerProtocolSubscription, each in one file only, so they are taken as they are.

The merge is checked, not trusted: after merging, the field layout of every version is compared
with the layout of the file that version came from, and the generator stops on any difference.

It writes the schema as data (``_schema.py``, read by the codec compiler) and the typed Python
source of every message class, the ``ApiKey`` and ``ErrorCode`` enums and the error classes
(``generated/``, ``messages.py``): see ``render_python``.

Usage:  python tools/gen_protocol.py [--shared DIR] [--extra DIR] [--check] [--output SCHEMA_PY]
"""

from __future__ import annotations

import argparse
import difflib
import json
import keyword
import pprint
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "src" / "kwire" / "protocol" / "_schema.py"
DEFAULT_SHARED = ROOT.parent / "shared" / "kafka-protocol"
# Kafka 4.3 layouts the shared folder lacks (see its README.md); read after the shared messages-4.3/.
EXTRA = ROOT / "tools" / "kafka-protocol-extra"

# Far above any real version; stands for an open range "N+".
TOP = 32767

# Keys of a field definition that carry structure.  Prose ("about") and broker-internal
# annotations (entityType, zeroCopy, ...) are dropped.
KEPT_FIELD_KEYS = (
    "versions",
    "nullableVersions",
    "taggedVersions",
    "tag",
    "ignorable",
    "default",
    "mapKey",
    "flexibleVersions",
)


def load_definition(path: Path) -> dict:
    """Kafka's files are JSON with ``//`` line comments."""
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)
    return json.loads(text)


def parse_versions(spec: str | None) -> set[int]:
    if spec is None or spec == "none":
        return set()
    spec = spec.strip()
    if spec.endswith("+"):
        return set(range(int(spec[:-1]), TOP + 1))
    if "-" in spec:
        lo, hi = spec.split("-")
        return set(range(int(lo), int(hi) + 1))
    return {int(spec)}


def to_range(versions: set[int], where: str) -> tuple[int, int] | None:
    """A set of versions as (lo, hi); hi == TOP means open-ended.  Gaps are a merge error."""
    if not versions:
        return None
    lo, hi = min(versions), max(versions)
    if len(versions) != hi - lo + 1:
        raise SystemExit(f"gen_protocol: {where}: versions {sorted(versions)[:8]}... are not contiguous")
    return (lo, hi)


class Source:
    """One message file, limited to the versions it is authoritative for."""

    def __init__(self, definition: dict, allowed: set[int]):
        self.definition = definition
        self.allowed = allowed
        self.common = {s["name"]: s for s in definition.get("commonStructs", [])}

    def expand(self, fields: list[dict]) -> list[dict]:
        """Fields with version sets clipped to ``allowed`` and common structs inlined."""
        out = []
        for f in fields:
            g = {k: f[k] for k in ("name", "type") if k in f}
            for key in KEPT_FIELD_KEYS:
                if key in f:
                    g[key] = f[key]
            g["taggedVersions"] = parse_versions(f.get("taggedVersions")) & self.allowed
            # As Kafka's FieldSpec: a tagged field without "versions" exists in its tagged versions
            # (TransactionLogValue's PreviousProducerId, for one).
            versions = f.get("versions")
            g["versions"] = (parse_versions(versions) if versions is not None else g["taggedVersions"]) & self.allowed
            g["nullableVersions"] = parse_versions(f.get("nullableVersions")) & self.allowed
            if "flexibleVersions" in f:
                g["flexibleVersions"] = parse_versions(f["flexibleVersions"]) & self.allowed
            children = f.get("fields")
            element = g["type"][2:] if g["type"].startswith("[]") else g["type"]
            if children is None and element in self.common:
                children = self.common[element]["fields"]
            if children is not None:
                g["fields"] = self.expand(children)
            out.append(g)
        return out


def merge_fields(a: list[dict], b: list[dict], where: str) -> list[dict]:
    """Merge two clipped field lists (a: older, b: newer) keeping each list's order."""
    names_a = [f["name"] for f in a]
    names_b = [f["name"] for f in b]
    by_a = {f["name"]: f for f in a}
    by_b = {f["name"]: f for f in b}
    order: list[str] = []
    matcher = difflib.SequenceMatcher(a=names_a, b=names_b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            order.extend(names_a[i1:i2])
        else:
            order.extend(n for n in names_a[i1:i2] if n not in order)
            order.extend(n for n in names_b[j1:j2] if n not in order)
    merged = []
    for name in order:
        fa, fb = by_a.get(name), by_b.get(name)
        if fa is None or fb is None:
            merged.append(fa or fb)
            continue
        if fa["type"] != fb["type"] and fa["versions"] and fb["versions"]:
            raise SystemExit(f"gen_protocol: {where}.{name}: type {fa['type']} vs {fb['type']}")
        f = dict(fb if fb["versions"] else fa)
        for key in ("versions", "nullableVersions", "taggedVersions"):
            f[key] = fa[key] | fb[key]
        if "flexibleVersions" in fa or "flexibleVersions" in fb:
            f["flexibleVersions"] = fa.get("flexibleVersions", set()) | fb.get("flexibleVersions", set())
        if "fields" in fa or "fields" in fb:
            f["fields"] = merge_fields(fa.get("fields", []), fb.get("fields", []), f"{where}.{name}")
        merged.append(f)
    return merged


def layout(fields: list[dict], version: int) -> list:
    """The wire-relevant shape of a field list at one version, for the merge check."""
    out = []
    for f in fields:
        if version not in f["versions"]:
            continue
        out.append(
            (
                f["name"],
                f["type"],
                version in f["nullableVersions"],
                version in f["taggedVersions"],
                int(f["tag"]) if "tag" in f else None,
                str(f.get("default")),
                layout(f["fields"], version) if "fields" in f else None,
            )
        )
    return out


def emit_field(f: dict, where: str) -> dict:
    out: dict = {"name": f["name"], "type": f["type"]}
    out["versions"] = to_range(f["versions"], f"{where}.{f['name']}")
    for key in ("nullableVersions", "taggedVersions"):
        r = to_range(f[key], f"{where}.{f['name']}.{key}")
        if r is not None:
            out[key] = r
    if "flexibleVersions" in f:
        out["flexibleVersions"] = to_range(f["flexibleVersions"], f"{where}.{f['name']}.flexible")
    if "tag" in f:
        out["tag"] = int(f["tag"])  # a few of Kafka's files write the tag as a string ("0")
    for key in ("ignorable", "mapKey"):
        if key in f:
            out[key] = f[key]
    if "default" in f:
        out["default"] = str(f["default"]) if not isinstance(f["default"], bool) else str(f["default"]).lower()
    if "fields" in f:
        out["fields"] = [emit_field(c, f"{where}.{f['name']}") for c in f["fields"] if c["versions"]]
    return out


def build(shared: Path, extra_dir: Path = EXTRA) -> dict:
    older = [load_definition(p) for p in sorted((shared / "messages").glob("*.json"))]
    newer = [load_definition(p) for p in sorted((shared / "messages-4.3").glob("*.json"))]
    extra = [load_definition(p) for p in sorted((extra_dir / "messages-4.3").glob("*.json"))]

    def key(d: dict):
        # Requests and responses are identified by api key (names change: ListClientMetricsResources
        # became ListConfigResources); headers and data structs by name.
        if d["type"] in ("request", "response"):
            return (d["type"], d["apiKey"])
        return (d["type"], d["name"])

    older_by_key = {key(d): d for d in older}
    newer_by_key = {key(d): d for d in newer + extra}
    messages = {}
    for k in sorted(set(older_by_key) | set(newer_by_key), key=str):
        o, n = older_by_key.get(k), newer_by_key.get(k)
        new_valid = parse_versions(n["validVersions"]) if n else set()
        old_valid = parse_versions(o["validVersions"]) if o else set()
        if new_valid:
            old_valid = {v for v in old_valid if v < min(new_valid)}
        name = (n or o)["name"]
        fields_old = Source(o, old_valid).expand(o["fields"]) if o else []
        fields_new = Source(n, new_valid).expand(n["fields"]) if n else []
        fields = merge_fields(fields_old, fields_new, name)
        valid = old_valid | new_valid
        flexible = set()
        if o:
            flexible |= parse_versions(o.get("flexibleVersions")) & old_valid
        if n:
            flexible |= parse_versions(n.get("flexibleVersions")) & new_valid
        # The check: every version's layout equals the layout of the file it came from.
        for v in sorted(valid):
            source_fields = fields_new if v in new_valid else fields_old
            if layout(fields, v) != layout(source_fields, v):
                raise SystemExit(f"gen_protocol: merged {name} v{v} differs from its source file")
        entry = {
            "name": name,
            "type": (n or o)["type"],
            "validVersions": to_range(valid, name),
            "flexibleVersions": to_range(flexible, f"{name}.flexible") if flexible else None,
            "fields": [emit_field(f, name) for f in fields if f["versions"]],
        }
        if "apiKey" in (n or o):
            entry["apiKey"] = (n or o)["apiKey"]
        messages[name] = entry
    # Coordinator records the shared set lacks (KIP-1071's StreamsGroup*, Kafka 4.1+) come from kwire's extra set,
    # and a file there of a shared file's name takes its place (a record Kafka 4.3 grew, e.g. KIP-1251's epochs).
    record_files = {p.name: p for p in sorted((shared / "coordinator-records").glob("*.json"))}
    record_files.update({p.name: p for p in sorted((extra_dir / "coordinator-records").glob("*.json"))})
    for path in record_files.values():
        d = load_definition(path)
        if d["type"] != "data" or d["name"] in messages:
            raise SystemExit(f"gen_protocol: {path.name}: not a new data message")
        valid = parse_versions(d["validVersions"])
        fields = Source(d, valid).expand(d["fields"])
        flexible = parse_versions(d.get("flexibleVersions")) & valid
        messages[d["name"]] = {
            "name": d["name"],
            "type": "data",
            "validVersions": to_range(valid, d["name"]),
            "flexibleVersions": to_range(flexible, f"{d['name']}.flexible") if flexible else None,
            "fields": [emit_field(f, d["name"]) for f in fields if f["versions"]],
        }
    errors = json.loads((shared / "error_codes.json").read_text())
    # Kafka 4.x error codes the shared table (read at a 4.0 snapshot) lacks, e.g. KIP-1071's STREAMS_*.
    extra_errors = extra_dir / "error_codes.json"
    if extra_errors.exists():
        known = {e["code"] for e in errors}
        added = json.loads(extra_errors.read_text())
        clash = [e["code"] for e in added if e["code"] in known]
        if clash:
            raise SystemExit(f"gen_protocol: {extra_errors}: codes {clash} are in the shared table already")
        errors = errors + added
    error_table = [(e["code"], e["name"], bool(e["retriable"])) for e in errors]
    return {"messages": messages, "errors": error_table,
            "coordinator_records": sorted(load_definition(p)["name"] for p in record_files.values())}


HEADER = '''\
"""Kafka message schemas: structure only, generated by tools/gen_protocol.py. Do not edit.

Source: Kafka's message definitions (messages/, messages-4.3/ and coordinator-records/, see
shared/kafka-protocol/SOURCE.md).
Version ranges are (lo, hi) with hi == {top} meaning "and every later version".
"""

from typing import Any

TOP = {top}

'''


def render(data: dict) -> str:
    # The error table goes to generated/error_codes.py (render_error_codes), not here.
    body = pprint.pformat(data["messages"], width=110, sort_dicts=False, compact=True)
    return HEADER.format(top=TOP) + f"MESSAGES: dict[str, dict[str, Any]] = {body}\n"


# ---------------------------------------------------------------- typed Python source
#
# Besides the data schema above (read by the codec compiler), the generator writes readable,
# typed Python: one module per API under ``protocol/generated/`` with its request and response
# classes, one for the headers, two for the data messages, the ``ApiKey`` and ``ErrorCode``
# enums with the per-API facts, and ``protocol/messages.py``, the lazy facade that imports an
# API's module the first time one of its classes is used (so ``import kwire.protocol`` stays cheap).

DO_NOT_EDIT = "Generated by tools/gen_protocol.py from Kafka's message definitions. Do not edit."

# Kafka types -> Python annotations of a value.
PY_TYPES = {
    "bool": "bool", "int8": "int", "int16": "int", "uint16": "int", "int32": "int", "uint32": "int",
    "int64": "int", "float64": "float", "string": "str", "bytes": "bytes", "uuid": "uuid.UUID",
    "records": "Records",
}
# Names the message base classes define: a field with one of these names would hide a method.
RESERVED_ATTRS = {"encode", "decode", "codec", "to_dict", "from_dict", "is_flexible", "request_class",
                  "response_class", "unknown_tags", "SPEC", "API_KEY", "MIN_VERSION", "MAX_VERSION"}


def snake_case(name: str) -> str:
    """As ``kwire.protocol.schema.snake_case`` (the codec's attribute names): ``ThrottleTimeMs`` -> ``throttle_time_ms``."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return s + "_" if keyword.iskeyword(s) else s


def default_literal(type_name: str, text: str | None) -> str:
    """The Python literal of a scalar default, as ``kwire.protocol.schema.parse_default`` reads it."""
    if text == "null" or type_name == "records":
        return "None"
    if type_name == "bool":
        return repr(text == "true")
    if type_name in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return repr(int(text, 0) if text not in (None, "") else 0)
    if type_name == "float64":
        return repr(float(text) if text not in (None, "") else 0.0)
    if type_name == "string":
        return quote(text or "")
    if type_name == "bytes":
        return 'b""'
    if type_name == "uuid":
        return "ZERO_UUID"
    raise SystemExit(f"gen_protocol: no default for type {type_name}")


def span(r: tuple[int, int] | None) -> str:
    if r is None:
        return "none"
    lo, hi = r
    return f"{lo}+" if hi == TOP else (f"{lo}" if lo == hi else f"{lo}-{hi}")


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def class_shape(fields: list[dict]) -> list:
    """What a struct's class depends on: attribute names, types and nested shapes (not versions)."""
    return [(f["name"], f["type"], class_shape(f["fields"]) if "fields" in f else None) for f in fields]


def wrapped(opening: str, names: list[str], closing: str) -> list[str]:
    """``opening "a", "b"closing`` on one line, or one name a line when that is too long."""
    line = opening + ", ".join(quote(n) for n in names) + closing
    if len(line) <= 110:
        return [line]
    ind = opening[: len(opening) - len(opening.lstrip())]
    return [opening, *(f"{ind}    {quote(n)}," for n in names), ind + closing.lstrip(",")]


class ModuleWriter:
    """The source of one generated module; remembers which imports the classes used."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.used: set[str] = set()

    def struct(self, name: str, qual: str, base: str, doc: str, fields: list[dict], ind: str,
               header: list[str]) -> None:
        out = self.lines
        attrs = [snake_case(f["name"]) for f in fields]
        for a in attrs:
            if a in RESERVED_ATTRS:
                raise SystemExit(f"gen_protocol: {qual}: field {a!r} would hide a method of the message classes")
        if len(set(attrs)) != len(attrs):
            raise SystemExit(f"gen_protocol: {qual}: two fields map to one attribute name")
        out.append(f"{ind}class {name}({base}):")
        out.append(f'{ind}    """{doc}"""')
        out.append("")
        out.extend(wrapped(f"{ind}    __slots__ = (", [*attrs, "unknown_tags"], ")"))
        out.extend(ind + "    " + h for h in header)
        out.extend(wrapped(f"{ind}    _attrs = (", attrs, ",)" if len(attrs) == 1 else ")"))
        if attrs:
            self.used.add("attrgetter")
            out.extend(wrapped(f"{ind}    _values = attrgetter(", attrs, ")"))
        else:
            self.used.add("no_values")
            out.append(f"{ind}    _values = staticmethod(no_values)")
        # Nested struct classes first, so the annotations below can name them.
        nested: dict[str, list] = {}
        for f in fields:
            if "fields" not in f:
                continue
            sub = f["type"][2:] if f["type"].startswith("[]") else f["type"]
            shape = class_shape(f["fields"])
            if sub in nested:
                if nested[sub] != shape:
                    raise SystemExit(f"gen_protocol: {qual}: two structs named {sub} with different fields")
                continue
            nested[sub] = shape
            out.append("")
            self.used.add("Struct")
            self.struct(sub, f"{qual}.{sub}", "Struct", f"An element of ``{qual}.{snake_case(f['name'])}``."
                        if f["type"].startswith("[]") else f"The ``{qual}.{snake_case(f['name'])}`` struct.",
                        f["fields"], ind + "    ", [])
        out.append("")
        params, body = [], []
        for f, a in zip(fields, attrs, strict=True):
            ann, default, assign = self.field_python(f, qual)
            notes = [f"versions {span(f['versions'])}"]
            if "nullableVersions" in f:
                notes.append(f"nullable {span(f['nullableVersions'])}")
            if "taggedVersions" in f:
                notes.append(f"tagged {span(f['taggedVersions'])} (tag {f['tag']})")
            if f.get("ignorable"):
                notes.append("ignorable")
            out.append(f"{ind}    {a}: {ann}  # {f['name']}: {', '.join(notes)}")
            params.append(f"{a}: {ann} = {default}")
            body.append(assign.format(a=a))
        self.used.add("unknown_tags")
        out.append(f"{ind}    unknown_tags: dict[int, bytes] | None  # tagged fields this schema does not name")
        out.append("")
        params.append("unknown_tags: dict[int, bytes] | None = None")
        out.append(f"{ind}    def __init__(")
        out.append(f"{ind}        self,")
        out.append(f"{ind}        *,")
        out.extend(f"{ind}        {p}," for p in params)
        out.append(f"{ind}    ) -> None:")
        out.extend(f"{ind}        {b}" for b in body)
        out.append(f"{ind}        self.unknown_tags = unknown_tags")

    def field_python(self, f: dict, qual: str) -> tuple[str, str, str]:
        """(annotation, default expression, assignment template) of a field's ``__init__`` parameter."""
        t = f["type"]
        is_array = t.startswith("[]")
        element = t[2:] if is_array else t
        nullable = "nullableVersions" in f
        null_default = f.get("default") == "null"
        if "fields" in f:
            py = f"{qual}.{element}"
        else:
            py = PY_TYPES[element]
            if element == "uuid":
                self.used.add("uuid")
            if element == "records":
                self.used.add("Records")
        if is_array or "fields" in f:
            ann = f"list[{py}]" if is_array else py
            if nullable or null_default:
                ann += " | None"
            if null_default:
                return ann, "None", "self.{a} = {a}"
            # A fresh list or struct per instance; an explicit None stays None (a null on the wire).
            self.used.add("MISSING")
            make = "[]" if is_array else f"{py}()"
            return ann, "MISSING", f"self.{{a}} = {make} if {{a}} is MISSING else {{a}}"
        default = default_literal(element, f.get("default"))
        if default == "ZERO_UUID":
            self.used.add("ZERO_UUID")
        ann = py + (" | None" if nullable or default == "None" else "")
        return ann, default, "self.{a} = {a}"

    def render(self, doc: str, extra_imports: list[str] = ()) -> str:
        stdlib = []
        if "uuid" in self.used:
            stdlib.append("import uuid")
        if "attrgetter" in self.used:
            stdlib.append("from operator import attrgetter")
        typing = [n for n in ("ClassVar",) if n in self.used]
        if typing:
            stdlib.append(f"from typing import {', '.join(typing)}")
        base_names = sorted((n for n in ("Data", "Header", "MISSING", "Records", "Request", "Response", "Struct",
                                         "ZERO_UUID", "no_values") if n in self.used),
                            key=lambda n: (not n.isupper(), n[0].islower(), n))
        local = []
        if base_names:
            local.append(f"from ..message_base import {', '.join(base_names)}")
        local.extend(extra_imports)
        head = [f'"""{doc}\n\n{DO_NOT_EDIT}\n"""', "", "from __future__ import annotations", ""]
        if stdlib:
            head += [*stdlib, ""]
        if local:
            head += [*local, ""]
        return "\n".join(head + [""] + self.lines).rstrip("\n") + "\n"


def api_module_name(api: str) -> str:
    return snake_case(api)


def enum_name(name: str) -> str:
    return snake_case(name).rstrip("_").upper()


def request_header_version(key: int, version: int, flexible: bool) -> int:
    # Kafka's ApiMessageType.requestHeaderVersion: header v2 for flexible versions, else v1, but
    # ControlledShutdown v0 (key 7) has the v0 header without a client id.
    if key == 7 and version == 0:
        return 0
    return 2 if flexible else 1


def response_header_version(key: int, version: int, flexible: bool) -> int:
    # Kafka's ApiMessageType.responseHeaderVersion: v1 for flexible versions, else v0, but the
    # ApiVersions response (key 18) always has header v0, so an old client can read the answer.
    if key == 18:
        return 0
    return 1 if flexible else 0


def header_spans(key: int, valid: tuple[int, int], flexible: tuple[int, int] | None, rule) -> str:
    spans: list[list[int]] = []
    for v in range(valid[0], valid[1] + 1):
        hv = rule(key, v, flexible is not None and flexible[0] <= v <= flexible[1])
        if spans and spans[-1][2] == hv:
            spans[-1][1] = v
        else:
            spans.append([v, v, hv])
    return "(" + "".join(f"({a}, {b}, {h}), " for a, b, h in spans).rstrip(" ") + ")"


def message_doc(m: dict, api: str | None) -> str:
    lo, hi = m["validVersions"]
    text = f"Kafka's {m['name']}"
    if api is not None:
        text += f": api key {m['apiKey']} (``ApiKey.{enum_name(api)}``)"
    text += f", versions {lo}-{hi}"
    text += f", flexible versions {span(m['flexibleVersions'])}." if m["flexibleVersions"] else ", no flexible versions."
    return text


def message_header(m: dict, api: str | None, w: ModuleWriter) -> list[str]:
    lo, hi = m["validVersions"]
    lines = []
    if api is not None:
        w.used.update({"ClassVar"})
        lines.append(f"API_KEY: ClassVar[ApiKey] = ApiKey.{enum_name(api)}")
    w.used.add("ClassVar")
    lines.append(f"MIN_VERSION: ClassVar[int] = {lo}")
    lines.append(f"MAX_VERSION: ClassVar[int] = {hi}")
    return lines


def render_python(data: dict, package: Path) -> dict[Path, str]:
    """Every generated source file of the protocol package, by path."""
    GENERATED = package / "generated"
    messages = data["messages"]
    files: dict[Path, str] = {}
    module_of: dict[str, str] = {}
    apis: dict[int, dict] = {}
    for m in messages.values():
        if m["type"] in ("request", "response"):
            apis.setdefault(m["apiKey"], {})[m["type"]] = m
    # One module per API: its request and response.
    for key in sorted(apis):
        req, resp = apis[key]["request"], apis[key]["response"]
        api = req["name"][: -len("Request")]
        mod = api_module_name(api)
        if mod in ("api_keys", "error_codes", "headers", "data", "coordinator_data"):
            raise SystemExit(f"gen_protocol: API {api} would replace the generated module {mod}")
        w = ModuleWriter()
        # A request class names its response class (Request's type parameter), so a client's
        # ``send`` is typed by the request it is given.
        for m, base, base_expr in ((req, "Request", f'Request["{resp["name"]}"]'), (resp, "Response", "Response")):
            w.used.add(base)
            if w.lines:
                w.lines += ["", ""]
            w.struct(m["name"], m["name"], base_expr, message_doc(m, api), m["fields"], "", message_header(m, api, w))
            module_of[m["name"]] = mod
        files[GENERATED / f"{mod}.py"] = w.render(f"The {api} API (key {key}): {req['name']} and {resp['name']}.",
                                                  ["from .api_keys import ApiKey"])
    # The data messages in two modules: what clients carry inside requests (the consumer protocol,
    # KRaft's records), and the coordinators' records, which only a broker reads; a consumer that
    # needs two classes loads 9 messages, not 56.
    records = set(data["coordinator_records"])
    for kind, mod, base, doc, wanted in (
        ("header", "headers", "Header", "The request and response headers.", None),
        ("data", "data", "Data", "Data messages other than the coordinators' records: the consumer protocol's "
         "(inside JoinGroup and SyncGroup), the principal of forwarded requests, KRaft's control records.", False),
        ("data", "coordinator_data", "Data",
         "The coordinators' records: the keys and values Kafka's group, transaction and share coordinators write "
         "to their internal topics.", True),
    ):
        w = ModuleWriter()
        w.used.add(base)
        for name, m in sorted(messages.items()):
            if m["type"] != kind or (wanted is not None and (name in records) != wanted):
                continue
            if w.lines:
                w.lines += ["", ""]
            w.struct(name, name, base, message_doc(m, None), m["fields"], "", message_header(m, None, w))
            module_of[name] = mod
        files[GENERATED / f"{mod}.py"] = w.render(doc)
    files[GENERATED / "api_keys.py"] = render_api_keys(apis)
    files[GENERATED / "error_codes.py"] = render_error_codes(data["errors"])
    files[GENERATED / "__init__.py"] = render_index(module_of)
    files[package / "messages.py"] = render_facade(module_of)
    return files


def render_api_keys(apis: dict[int, dict]) -> str:
    out = [f'"""Kafka\'s API keys and what the definitions say of each API.\n\n{DO_NOT_EDIT}\n"""', "",
           # (No ``from __future__ import annotations``: NamedTuple would compile each string annotation.)
           "from typing import NamedTuple", "", "from ..fast_enum import IntEnumBody, int_enum",
           "", "", "@int_enum  # an IntEnum, made as the standard library makes its large ones (see fast_enum)",
           "class ApiKey(IntEnumBody):", '    """Kafka\'s API keys, by API name (``ApiKey.METADATA == 3``)."""', ""]
    for key in sorted(apis):
        out.append(f"    {enum_name(apis[key]['request']['name'][: -len('Request')])} = {key}")
    out += ["", "", "class ApiInfo(NamedTuple):",
            '    """One API: the versions kwire speaks and the header version each version uses.',
            "",
            "    Header versions are spans ``(first, last, header version)`` covering min..max:",
            "    flexible versions carry request header v2 / response header v1, the others v1 / v0, with",
            "    Kafka's two exceptions (ControlledShutdown v0's request header v0, ApiVersions' response",
            '    header always v0)."""', "",
            "    key: ApiKey",
            "    name: str",
            "    min_version: int",
            "    max_version: int",
            "    request_flexible_versions: tuple[int, int] | None",
            "    response_flexible_versions: tuple[int, int] | None",
            "    request_header_versions: tuple[tuple[int, int, int], ...]",
            "    response_header_versions: tuple[tuple[int, int, int], ...]",
            "", "",
            "# By api key (an ApiKey, or the plain int read from a frame).",
            "API_INFO: dict[int, ApiInfo] = {"]
    for key in sorted(apis):
        req, resp = apis[key]["request"], apis[key]["response"]
        if req["validVersions"] != resp["validVersions"]:
            raise SystemExit(f"gen_protocol: {req['name']} and its response have different versions")
        api = req["name"][: -len("Request")]
        member = f"ApiKey.{enum_name(api)}"
        valid = req["validVersions"]
        out.append(f"    {member}: ApiInfo(")
        out.append(f"        {member}, {quote(api)}, {valid[0]}, {valid[1]},")
        out.append(f"        {tuple(req['flexibleVersions']) if req['flexibleVersions'] else None}, "
                   f"{tuple(resp['flexibleVersions']) if resp['flexibleVersions'] else None},")
        out.append(f"        {header_spans(key, valid, req['flexibleVersions'], request_header_version)},")
        out.append(f"        {header_spans(key, valid, resp['flexibleVersions'], response_header_version)},")
        out.append("    ),")
    out.append("}")
    return "\n".join(out) + "\n"


def error_class_name(name: str) -> str:
    words = "".join(part.capitalize() for part in name.split("_"))
    return words if words.endswith(("Error", "Exception")) else words + "Error"


HAND_WRITTEN_ERRORS = {"ProtocolError", "DecodeError", "EncodeError", "UnknownApiVersionError",
                       "FrameTooLargeError", "CorruptRecordError", "KafkaError"}


def render_error_codes(errors: list[tuple[int, str, bool]]) -> str:
    out = [f'"""Kafka\'s error codes: the ``ErrorCode`` enum and one ``KafkaError`` class per code.\n\n'
           f'{DO_NOT_EDIT}\n"""', "",
           "from __future__ import annotations", "", "from ..error_types import KafkaError",
           "from ..fast_enum import IntEnumBody, int_enum", "", "",
           "@int_enum  # an IntEnum, made as the standard library makes its large ones (see fast_enum)",
           "class ErrorCode(IntEnumBody):",
           '    """Kafka\'s error codes by name.  ``retriable``: Kafka\'s definitions let a client retry after',
           '    it; ``message``: a readable form of the name (``ErrorCode.NOT_COORDINATOR.message == "not',
           '    coordinator"``)."""',
           ""]
    for code, name, retriable in errors:
        out.append(f"    {name} = {code}" + ("  # retriable" if retriable else ""))
    # Properties rather than per-member values: an enum whose members are plain ints is made
    # several times faster at import.
    out += ["",
            "    @property",
            "    def retriable(self) -> bool:",
            "        return self in RETRIABLE",
            "",
            "    @property",
            "    def message(self) -> str:",
            '        return self.name.lower().replace("_", " ")',
            "",
            "",
            "# The codes Kafka's definitions mark retriable.",
            "RETRIABLE: frozenset[ErrorCode] = frozenset({"]
    out += [f"    ErrorCode.{name}," for _code, name, retriable in errors if retriable]
    out.append("})")
    classes = []
    for code, name, retriable in errors:
        if code == 0:
            continue
        cls = error_class_name(name)
        if cls in HAND_WRITTEN_ERRORS:
            raise SystemExit(f"gen_protocol: Kafka error {name} would replace kwire's {cls}")
        classes.append((code, cls))
        out += ["", "", f"class {cls}(KafkaError):",
                f'    """Error {code}, {name}{" (retriable)" if retriable else ""}."""', "",
                f"    code = ErrorCode.{name}",
                f"    name = {quote(name)}",
                f"    retriable = {retriable}"]
    out += ["", "", "# Every class above by its code (``KafkaError.for_code`` reads it).",
            "ERROR_CLASSES: dict[int, type[KafkaError]] = {"]
    out += [f"    {code}: {cls}," for code, cls in classes]
    out += ["}", "", "__all__ = [", '    "ERROR_CLASSES",', '    "RETRIABLE",', '    "ErrorCode",']
    out += [f"    {quote(cls)}," for _, cls in classes]
    out.append("]")
    return "\n".join(out) + "\n"


def render_index(module_of: dict[str, str]) -> str:
    out = [f'"""The generated message classes, one module per API (see ``kwire.protocol.messages``).\n\n'
           f'{DO_NOT_EDIT}\n"""', "", "# The module under this package that defines each message class.",
           "MESSAGE_MODULES: dict[str, str] = {"]
    out += [f"    {quote(name)}: {quote(mod)}," for name, mod in sorted(module_of.items())]
    out.append("}")
    return "\n".join(out) + "\n"


def render_facade(module_of: dict[str, str]) -> str:
    by_module: dict[str, list[str]] = {}
    for name, mod in module_of.items():
        by_module.setdefault(mod, []).append(name)
    out = ['"""Typed Kafka messages: one class per request, response, header and data message.',
           "",
           "The classes are generated source in ``kwire.protocol.generated`` (one module per API), named as",
           "Kafka names them; this module imports an API's module the first time one of its classes is",
           "asked for, so importing kwire stays cheap::",
           "",
           "    from kwire.protocol import messages",
           '    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="t")])',
           "    data = req.encode(version=12)",
           "    same = messages.MetadataRequest.decode(data, version=12)",
           "",
           "Nested struct classes hang off their message class (``MetadataRequest.MetadataRequestTopic``),",
           "because Kafka reuses struct names across messages with different fields.  Field names are",
           "snake_case forms of Kafka's (``ThrottleTimeMs`` -> ``throttle_time_ms``).",
           "",
           DO_NOT_EDIT,
           '"""',
           "",
           "from __future__ import annotations",
           "",
           "from typing import TYPE_CHECKING",
           "",
           "from .generated import MESSAGE_MODULES",
           "from .message_base import Data, Header, Message, Request, Response, message_class, request_class, response_class",
           "",
           "if TYPE_CHECKING:"]
    for mod in sorted(by_module):
        names = sorted(by_module[mod])
        out.append(f"    from .generated.{mod} import (")
        out += [f"        {n}," for n in names]
        out.append("    )")
    out += ["",
            "# The message classes are listed too: type checkers read them from the imports above.",
            "__all__ = [",
            '    "Data", "Header", "Message", "Request", "Response", "message_class", "request_class", "response_class",']
    out += [f"    {quote(n)}," for n in sorted(module_of)]
    out += ["]",
            "",
            "",
            "def __getattr__(name: str) -> type[Message]:",
            "    if name in MESSAGE_MODULES:",
            "        cls = message_class(name)",
            "        globals()[name] = cls  # later uses are a plain attribute",
            "        return cls",
            '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")',
            "",
            "",
            "def __dir__() -> list[str]:",
            "    return sorted(list(globals()) + list(MESSAGE_MODULES))"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the kafka-protocol folder")
    ap.add_argument("--extra", type=Path, default=EXTRA, help="kwire's additional definitions")
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed modules differ")
    ap.add_argument("--output", type=Path, default=OUTPUT,
                    help="the schema module; the Python sources go beside it (generated/, messages.py)")
    args = ap.parse_args(argv)
    data = build(args.shared, args.extra)
    files = {args.output: render(data), **render_python(data, args.output.parent)}
    generated = args.output.parent / "generated"
    stale = sorted(set(generated.glob("*.py")) - set(files)) if generated.is_dir() else []
    if args.check:
        wrong = [p for p, text in files.items() if not p.exists() or p.read_text() != text] + stale
        if wrong:
            names = ", ".join(str(p) for p in wrong[:5]) + (" ..." if len(wrong) > 5 else "")
            print(f"out of date: {names}: run python tools/gen_protocol.py", file=sys.stderr)
            return 1
        return 0
    for path in stale:
        path.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    print(f"wrote {args.output} ({len(data['messages'])} messages) and {len(files) - 1} Python modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
