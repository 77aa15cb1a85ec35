"""A small JSON document in the data dir, shared by the broker and the offline CLI commands.

Readers re-read it when it changed on disk (inode, size or mtime differ), so an edit made by
``kwire users`` or ``kwire acls`` while the broker runs takes effect at the next login or request.
Writers hold an exclusive lock on a sibling ``.lock`` file for the whole read-modify-write, so two
writers (the broker and a CLI command) never lose each other's changes. Files are created 0600:
they hold credential hashes and the access policy.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from ..storage._files import atomic_write

T = TypeVar("T")
logger = logging.getLogger("kwire.broker.auth")


def write_private(path: Path, data: bytes) -> None:
    """Atomically replace path with data, readable by the owner only, fsynced."""
    atomic_write(path, data, mode=0o600)


class JsonFile(Generic[T]):
    """``current()`` gives the parsed document, re-read when the file changed; ``update(fn)`` rewrites it."""

    def __init__(self, path: Path, parse: Callable[[object], T], dump: Callable[[T], object], empty: T):
        self.path = Path(path)
        self._parse = parse
        self._dump = dump
        self._empty = empty
        self._value = empty
        self._signature: tuple[int, int, int] | None = None
        self.generation = 0  # bumped whenever the value changes (caches key on it)
        self.current()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read(self) -> T:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return self._empty
        return self._parse(json.loads(raw))

    def current(self) -> T:
        signature = self._stat()
        if signature != self._signature:
            try:
                value = self._read()
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # Keep serving with what we had: a broken file must not open (or lock) everything.
                logger.error("%s is unreadable, keeping the previous contents: %s", self.path, exc)
                self._signature = signature
                return self._value
            self._value, self._signature = value, signature
            self.generation += 1
        return self._value

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def update(self, change: Callable[[T], T]) -> T:
        """Apply change to the file's current contents (read under the lock) and write the result.

        An unreadable file is an error here (ValueError): rewriting it would silently drop its contents.
        """
        with self._locked():
            try:
                value = self._read()
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{self.path} is unreadable; fix or remove it: {exc}") from None
            new = change(value)
            write_private(self.path, json.dumps(self._dump(new), indent=1, sort_keys=True).encode() + b"\n")
            self._value, self._signature = new, self._stat()
            self.generation += 1
            return new
