"""Generate ``src/kwire/protocol/_schema.py`` from Kafka's message definitions.

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

Usage:  python tools/gen_protocol.py [--shared DIR] [--check]
"""

from __future__ import annotations

import argparse
import difflib
import json
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


def build(shared: Path) -> dict:
    older = [load_definition(p) for p in sorted((shared / "messages").glob("*.json"))]
    newer = [load_definition(p) for p in sorted((shared / "messages-4.3").glob("*.json"))]
    extra = [load_definition(p) for p in sorted((EXTRA / "messages-4.3").glob("*.json"))]

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
    for path in sorted((shared / "coordinator-records").glob("*.json")):
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
    error_table = [(e["code"], e["name"], bool(e["retriable"])) for e in errors]
    return {"messages": messages, "errors": error_table}


HEADER = '''\
"""Kafka message schemas: structure only, generated by tools/gen_protocol.py. Do not edit.

Source: Kafka's message definitions (messages/, messages-4.3/ and coordinator-records/, see
shared/kafka-protocol/SOURCE.md).
Version ranges are (lo, hi) with hi == {top} meaning "and every later version".
"""

TOP = {top}

'''


def render(data: dict) -> str:
    body = pprint.pformat(data["messages"], width=110, sort_dicts=False, compact=True)
    errors = pprint.pformat(data["errors"], width=110, compact=True)
    return HEADER.format(top=TOP) + f"MESSAGES = {body}\n\nERRORS = {errors}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the kafka-protocol folder")
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed module differs")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    args = ap.parse_args(argv)
    text = render(build(args.shared))
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python tools/gen_protocol.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(data_names(text))} messages)")
    return 0


def data_names(text: str) -> list[str]:
    return re.findall(r"^ '(\w+)': \{'name'", text, flags=re.M)


if __name__ == "__main__":
    sys.exit(main())
