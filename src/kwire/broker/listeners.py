"""Listeners: where the broker accepts connections, and with which security protocol.

Kafka's syntax, so configs carry over::

    listeners = ["PLAINTEXT://127.0.0.1:9092", "CLIENT://0.0.0.0:9093"]
    listener_security_protocol_map = ["CLIENT:SASL_SSL"]     # Kafka: CLIENT:SASL_SSL,PLAINTEXT:PLAINTEXT
    advertised_listeners = ["CLIENT://kafka.example.com:9093"]

A listener named after a protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) needs no map entry.
Without ``listeners`` the broker has one PLAINTEXT listener on ``host``:``port`` (the historic setting).
Each connection is served with its listener: Metadata and FindCoordinator answer with that listener's
advertised address, as Kafka does, so a client on the TLS port is never sent to the plain one.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..settings import ConfigError

__all__ = ["PROTOCOLS", "Listener", "ListenerSpec", "parse_advertised", "parse_listeners", "wildcard_host"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_URL = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)://(?:\[(?P<ip6>[^\]]*)\]|(?P<host>[^:/\[\]]*)):(?P<port>\d+)$")


@dataclass(frozen=True)
class ListenerSpec:
    """One configured listener (port 0: pick a free one)."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(eq=False)
class Listener:
    """A listener once bound: its spec, the port it got, what clients are told, its TLS context."""

    spec: ListenerSpec
    port: int
    advertised: tuple[str, int]
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def protocol(self) -> str:
        return self.spec.protocol

    @property
    def tls(self) -> bool:
        return self.spec.tls

    @property
    def sasl(self) -> bool:
        return self.spec.sasl


def wildcard_host(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _parse_url(text: str, what: str) -> tuple[str, str, int]:
    m = _URL.match(text.strip())
    if m is None:
        raise ConfigError(f"{what} {text!r} must look like NAME://host:port (e.g. SASL_SSL://0.0.0.0:9093)")
    port = int(m["port"])
    if port > 65535:
        raise ConfigError(f"{what} {text!r}: port must be 0-65535")
    host = m["ip6"] if m["ip6"] is not None else m["host"]
    return m["name"].upper(), host, port


def parse_protocol_map(entries: Iterable[str]) -> dict[str, str]:
    """Kafka's listener.security.protocol.map: "NAME:PROTOCOL" entries."""
    mapping: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise ConfigError(f"listener_security_protocol_map entry {entry!r} must be NAME:PROTOCOL with "
                              f"PROTOCOL one of {', '.join(PROTOCOLS)}")
        mapping[name] = protocol
    return mapping


def parse_listeners(listeners: Iterable[str], protocol_map: Iterable[str] = ()) -> list[ListenerSpec]:
    mapping = parse_protocol_map(protocol_map)
    specs: list[ListenerSpec] = []
    for text in listeners:
        name, host, port = _parse_url(text, "listener")
        protocol = mapping.get(name) or (name if name in PROTOCOLS else None)
        if protocol is None:
            raise ConfigError(f"listener {text!r}: {name} is not a security protocol and has no entry in "
                              f"listener_security_protocol_map (e.g. {name}:SASL_SSL)")
        if any(s.name == name for s in specs):
            raise ConfigError(f"listener name {name} is used twice")
        if port and any(s.port == port and (s.host == host or wildcard_host(s.host) or wildcard_host(host))
                        for s in specs):
            raise ConfigError(f"listener {text!r}: port {port} is used by another listener")
        specs.append(ListenerSpec(name, protocol, host, port))
    unused = set(mapping) - {s.name for s in specs}
    if unused and specs:
        raise ConfigError(f"listener_security_protocol_map names {', '.join(sorted(unused))}, "
                          "which no listener uses")
    return specs


def parse_advertised(entries: Iterable[str], specs: list[ListenerSpec]) -> dict[str, tuple[str, int]]:
    """Kafka's advertised.listeners: NAME://host:port per listener (port 0: the bound port)."""
    names = {s.name for s in specs}
    advertised: dict[str, tuple[str, int]] = {}
    for text in entries:
        name, host, port = _parse_url(text, "advertised listener")
        if name not in names:
            raise ConfigError(f"advertised listener {text!r} names no listener (listeners: {', '.join(sorted(names))})")
        if not host or wildcard_host(host):
            raise ConfigError(f"advertised listener {text!r} needs a host clients can reach")
        advertised[name] = (host, port)
    return advertised
