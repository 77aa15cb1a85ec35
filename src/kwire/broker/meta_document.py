"""One versioned JSON document of the broker's own in the data dir's ``__kwire/``: the dynamic
broker configs, the group configs, the client quotas.  Each is read once at start and rewritten
whole, atomically, at every change (they are small and change rarely), so a crash leaves the old
document or the new one.  A document that cannot be read stops the broker with a message naming
the file, what is wrong and what to do: its settings are never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .storage._files import atomic_write

__all__ = ["MetaDocument"]

T = TypeVar("T")


class MetaDocument:
    """``path`` holds ``{"version": version, ...}``; ``what`` names its contents in messages and
    ``what_to_do`` says how a user recovers from an unreadable one."""

    def __init__(self, path: Path, version: int, what: str, what_to_do: str):
        self.path = path
        self.version = version
        self.what = what
        self.what_to_do = what_to_do

    def unreadable(self, why: str) -> ValueError:
        return ValueError(f"{self.path}: unreadable {self.what}: {why}; {self.what_to_do}")

    def load(self, parse: Callable[[dict[str, Any]], T], empty: T) -> T:
        """``parse(document)`` of the stored document, ``empty`` when there is none.  A parse
        that raises KeyError, TypeError, ValueError or AttributeError (a field missing or of the
        wrong kind) becomes the ValueError of an unreadable document."""
        try:
            doc = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return empty
        except (OSError, ValueError) as exc:
            raise self.unreadable(str(exc)) from None
        if not isinstance(doc, dict) or doc.get("version") != self.version:
            raise self.unreadable(f"not a version {self.version} document")
        try:
            return parse(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self.unreadable(f"{type(exc).__name__} {exc}") from None

    def save(self, body: dict[str, Any]) -> None:
        """Replace the document with ``body`` (its version added), atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"version": self.version, **body}, indent=1).encode())
