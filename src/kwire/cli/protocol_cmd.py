"""``kwire protocol``: the protocol itself, for people learning or debugging it.

    kwire protocol list                       every api key with its version range
    kwire protocol show Metadata --version 1  the request and response layout in that version
    kwire protocol decode --hex 0000...       a frame as readable JSON
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from kwire.protocol import (
    API_KEYS,
    ProtocolError,
    api_key_for,
    api_name,
    decode_request,
    decode_response,
    request_class,
    request_header_version,
    response_class,
    response_header_version,
)
from kwire.protocol.records import iter_batches
from kwire.protocol.schema import FieldSpec, MessageSpec, StructSpec

from .output import fail, print_json, print_table, to_jsonable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("protocol", help="inspect Kafka's protocol: api list, message layouts, frame decoding",
                       description="Inspect Kafka's wire protocol as kwire speaks it (v0 to Kafka 4.3).")
    psub = p.add_subparsers(dest="protocol_command", metavar="SUBCOMMAND")
    psub.required = True

    q = psub.add_parser("list", help="api keys, names and version ranges",
                        description="Every api key kwire speaks with its version range.")
    q.add_argument("--json", action="store_true", help="JSON output")
    q.set_defaults(func=cmd_list)

    q = psub.add_parser("show", help="field layout of an API's request and response",
                        description="The field layout of an API's request and response, in one version or across all.")
    q.add_argument("api", help="API name or key: Metadata, metadata, MetadataRequest, 3")
    q.add_argument("--version", "-v", type=int, help="show the wire layout of this version")
    q.add_argument("--json", action="store_true", help="JSON output")
    q.set_defaults(func=cmd_show)

    q = psub.add_parser("decode", help="decode a frame to JSON",
                        description="Decode one Kafka frame (with or without its 4-byte size prefix). Requests "
                                    "describe themselves; a response needs --api and --version.")
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--hex", help="the frame as hex (spaces, colons and 0x prefixes are ignored)")
    src.add_argument("--file", help="a file with the raw frame bytes ('-' for standard input)")
    q.add_argument("--response", action="store_true", help="the frame is a response")
    q.add_argument("--api", help="api name or key of the response")
    q.add_argument("--version", "-v", type=int, help="api version of the response")
    q.add_argument("--records", action="store_true",
                   help="decode record sets (Produce, Fetch) into batches and records instead of hex")
    q.add_argument("--json", action="store_true", help="compact one-line JSON (default: indented)")
    q.set_defaults(func=cmd_decode)


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for key in API_KEYS:
        req = request_class(key).SPEC
        flex = f"{req.flexible[0]}+" if req.flexible else "none"
        rows.append({"api_key": key, "name": api_name(key), "min_version": req.min_version,
                     "max_version": req.max_version, "flexible_versions": flex})
    if args.json:
        print_json(rows)
        return 0
    print_table(["KEY", "NAME", "MIN", "MAX", "FLEXIBLE"],
                [[r["api_key"], r["name"], r["min_version"], r["max_version"], r["flexible_versions"]] for r in rows],
                align_right=[0, 2, 3])
    return 0


def _wire_type(f: FieldSpec, version: int, flexible: bool) -> str:
    """The field's type as Kafka's protocol documentation names it, in one version."""
    compact = f.is_flexible(version, flexible)
    nullable = f.is_nullable(version)
    prefix = "COMPACT_" if compact else ""
    if f.is_array:
        inner = f.struct.name if f.struct is not None else f.element.upper()
        return f"{prefix}{'NULLABLE_' if nullable else ''}ARRAY[{inner}]"
    if f.struct is not None:
        return f"{'NULLABLE ' if nullable else ''}STRUCT {f.struct.name}"
    t = f.element
    if t in ("string", "bytes", "records"):
        name = {"string": "STRING", "bytes": "BYTES", "records": "RECORDS"}[t]
        if t == "records":
            return f"{prefix}RECORDS" if not nullable else f"{prefix}NULLABLE_RECORDS"
        return f"{prefix}{'NULLABLE_' if nullable else ''}{name}"
    return {"bool": "BOOLEAN", "float64": "FLOAT64"}.get(t, t.upper())


def _notes(f: FieldSpec, version: int | None) -> str:
    notes = []
    if version is None:
        notes.append(f"v{f.versions[0]}-{f.versions[1]}")
        if f.nullable:
            notes.append(f"nullable v{f.nullable[0]}-{f.nullable[1]}")
        if f.tagged:
            notes.append(f"tag {f.tag} in v{f.tagged[0]}-{f.tagged[1]}")
    elif f.is_tagged(version):
        notes.append(f"tagged field {f.tag}")
    if f.default_text not in (None, ""):
        notes.append(f"default {f.default_text}")
    if f.ignorable:
        notes.append("ignorable")
    if f.map_key:
        notes.append("map key")
    return ", ".join(notes)


def _layout(struct: StructSpec, spec: MessageSpec, version: int | None, depth: int = 0) -> list[dict[str, Any]]:
    rows = []
    flexible = spec.is_flexible(version) if version is not None else False
    for f in struct.fields:
        if version is not None and not f.present(version):
            continue
        row = {
            "field": f.name,
            "attribute": f.attr,
            "depth": depth,
            "type": _wire_type(f, version, flexible) if version is not None else f.type,
            "notes": _notes(f, version),
        }
        rows.append(row)
        if f.struct is not None:
            rows.extend(_layout(f.struct, spec, version, depth + 1))
    return rows


def cmd_show(args: argparse.Namespace) -> int:
    try:
        key = api_key_for(args.api)
    except KeyError:
        return fail(f"no API named {args.api!r} (see 'kwire protocol list')")
    req, resp = request_class(key).SPEC, response_class(key).SPEC
    v = args.version
    if v is not None and not req.has_version(v):
        return fail(f"{api_name(key)} has no version {v} (kwire speaks {req.min_version}-{req.max_version})")
    result = {"api_key": key, "name": api_name(key), "version": v, "versions": [req.min_version, req.max_version]}
    for part, spec in (("request", req), ("response", resp)):
        result[part] = {"message": spec.name, "fields": _layout(spec.struct, spec, v)}
        if v is not None:
            result[part]["flexible"] = spec.is_flexible(v)
            hv = request_header_version(key, v) if part == "request" else response_header_version(key, v)
            result[part]["header_version"] = hv
    if args.json:
        print_json(result)
        return 0
    title = f"{api_name(key)} (api key {key}), versions {req.min_version}-{req.max_version}"
    print(title if v is None else f"{api_name(key)} (api key {key}) version {v}")
    for part in ("request", "response"):
        info = result[part]
        print()
        head = f"{info['message']}"
        if v is not None:
            head += f"  ({'flexible' if info['flexible'] else 'not flexible'}, {part} header v{info['header_version']})"
        print(head)
        if not info["fields"]:
            print("  (no fields)")
            continue
        print_table(["FIELD", "TYPE", "NOTES"],
                    [["  " * r["depth"] + r["field"], r["type"], r["notes"]] for r in info["fields"]])
    return 0


def _read_frame(args: argparse.Namespace) -> bytes:
    if args.hex is not None:
        text = re.sub(r"0x|[\s:,]", "", args.hex)
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise ValueError("--hex is not valid hexadecimal") from None
    if args.file == "-":
        return sys.stdin.buffer.read()
    with open(args.file, "rb") as fh:
        return fh.read()


def cmd_decode(args: argparse.Namespace) -> int:
    try:
        data = _read_frame(args)
    except (OSError, ValueError) as e:
        return fail(str(e))
    # A size prefix is recognised when it matches the rest of the input exactly.
    if len(data) >= 4 and int.from_bytes(data[:4], "big") == len(data) - 4:
        data = data[4:]
    try:
        if args.response:
            if args.api is None or args.version is None:
                return fail("decoding a response needs --api and --version (a response does not name its api)")
            try:
                key = api_key_for(args.api)
            except KeyError:
                return fail(f"no API named {args.api!r}")
            header, message = decode_response(data, key, args.version)
            out = {"kind": "response", "api": api_name(key), "api_key": key, "api_version": args.version,
                   "header": to_jsonable(header)}
        else:
            header, message = decode_request(data)
            out = {"kind": "request", "api": api_name(header.request_api_key), "api_key": header.request_api_key,
                   "api_version": header.request_api_version, "header": to_jsonable(header)}
        body = to_jsonable(message)
        if args.records:
            _expand_records(type(message).SPEC.struct, message, body)
        out["body"] = body
    except ProtocolError as e:
        return fail(f"cannot decode: {e}", 1)
    print_json(out, indent=None if args.json else 2)
    return 0


def _text_or_hex(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + value.hex()


def _expand_records(struct: StructSpec, obj: Any, out: dict[str, Any]) -> None:
    """Replace the hex of every records field in ``out`` (the JSON form of obj) by its batches."""
    for f in struct.fields:
        value = getattr(obj, f.attr)
        if value is None:
            continue
        if f.struct is not None:
            items = value if f.is_array else [value]
            outs = out[f.attr] if f.is_array else [out[f.attr]]
            for item, item_out in zip(items, outs, strict=True):
                _expand_records(f.struct, item, item_out)
        elif f.element == "records":
            batches = []
            for batch in iter_batches(value):
                info = batch.header()
                info["records"] = [
                    {"offset": r.offset, "timestamp": r.timestamp, "key": _text_or_hex(r.key),
                     "value": _text_or_hex(r.value),
                     "headers": [[k, _text_or_hex(v)] for k, v in r.headers]}
                    for r in batch
                ]
                batches.append(info)
            out[f.attr] = batches
