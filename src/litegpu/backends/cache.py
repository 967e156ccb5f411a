"""The compile cache: what a later start of the same model can skip.

Entries are opaque payloads (serialized XLA executables) stored under a key
that covers everything changing the compiled result (model token, signature,
input shapes, accelerator and device kind, precision, litegpu/JAX versions).

Nothing read back is trusted: every entry carries a header with a magic, the
key it was written for, its payload length and an xxh3 checksum; a
truncated, corrupt or mismatching entry is deleted and reported as a miss.
The directory is private (0700); a file not owned by the user, or writable
by others, is ignored with a warning.  Writes go to a temp file renamed into
place, so concurrent processes never see half-written entries.  The cache
keeps under a size cap by evicting the least recently used entries.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import struct
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from ..errors import CacheError

log = logging.getLogger("litegpu.cache")

MAGIC = b"LGPUC001"
_HEADER = struct.Struct("<8s32sQ16s")  # magic, key (hex of 128-bit digest), payload length, xxh3_128 of payload
DEFAULT_MAX_BYTES = 4 << 30
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_model_token(token: str) -> str:
    """A user-given model token names cache files: refuse anything that could escape the folder."""
    if not isinstance(token, str) or not _TOKEN.match(token) or ".." in token:
        raise CacheError(f"model_token {token!r} is not allowed: use 1 to 128 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit, without '..' or path separators")
    return token


def fingerprint(data: Any, chunk: int = 16 << 20) -> str:
    """xxh3-128 of a model's bytes (bytes, mmap or memoryview), streamed in chunks."""
    h = xxhash.xxh3_128()
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        h.update(view[start:start + chunk])
    return h.hexdigest()


def make_key(parts: Mapping[str, Any]) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(parts, sort_keys=True, default=str).encode())


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    size: int
    last_used: float
    meta: dict


class CompileCache:
    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory).expanduser()
        self.max_bytes = max_bytes
        self._prepare_directory()

    # -- safety -----------------------------------------------------------------
    def _prepare_directory(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(f"cannot create cache directory {self.directory}: {e.strerror}") from None
        if not self._trusted(self.directory):
            raise CacheError(f"cache directory {self.directory} is not owned by you or is writable by others; "
                             "refusing to load compiled code from it")

    @staticmethod
    def _trusted(path: Path) -> bool:
        try:
            st = path.lstat()
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            return False
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return False
        return not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)

    def _entry_path(self, key: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{32}", key):
            raise CacheError(f"invalid cache key {key!r}")
        return self.directory / f"{key}.bin"

    def _meta_path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def discard(self, key: str, reason: str) -> None:
        warnings.warn(f"litegpu compile cache: discarding entry {key} in {self.directory}: {reason}; "
                      "it will be rebuilt", RuntimeWarning, stacklevel=3)
        for p in (self._entry_path(key), self._meta_path(key)):
            try:
                p.unlink()
            except OSError:
                pass

    # -- entries ---------------------------------------------------------------
    def load(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None (miss, or a bad entry discarded)."""
        path = self._entry_path(key)
        if not path.exists():
            return None
        if not self._trusted(path):
            warnings.warn(f"litegpu compile cache: ignoring {path}: not owned by you or writable by others",
                          RuntimeWarning, stacklevel=2)
            return None
        try:
            blob = path.read_bytes()
        except OSError as e:
            self.discard(key, f"unreadable ({e.strerror})")
            return None
        if len(blob) < _HEADER.size:
            self.discard(key, "truncated header")
            return None
        magic, stored_key, length, digest = _HEADER.unpack_from(blob)
        payload = blob[_HEADER.size:]
        if magic != MAGIC:
            self.discard(key, "not a litegpu cache entry (or written by another format version)")
            return None
        if stored_key.decode("ascii", "replace") != key:
            self.discard(key, "written for another key")
            return None
        if length != len(payload):
            self.discard(key, f"truncated: {len(payload)} of {length} payload bytes")
            return None
        if xxhash.xxh3_128_digest(payload) != digest:
            self.discard(key, "checksum mismatch (corrupt)")
            return None
        try:
            os.utime(path)  # last use, for LRU eviction
        except OSError:
            pass
        return payload

    def store(self, key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> None:
        header = _HEADER.pack(MAGIC, key.encode("ascii"), len(payload), xxhash.xxh3_128_digest(payload))
        self._write_atomic(self._entry_path(key), header + payload)
        info = {"key": key, "created": time.time(), "size": len(payload), **(meta or {})}
        self._write_atomic(self._meta_path(key), json.dumps(info, sort_keys=True, default=str).encode())
        self.evict()

    def _write_atomic(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            try:
                tmp.unlink()
            except OSError:
                pass
            log.warning("litegpu compile cache: could not write %s: %s", path, e)

    def entries(self) -> Iterator[CacheEntry]:
        for path in sorted(self.directory.glob("*.bin")):
            key = path.stem
            try:
                st = path.stat()
                meta = json.loads(self._meta_path(key).read_text())
            except (OSError, ValueError):
                st, meta = path.stat() if path.exists() else None, {}
                if st is None:
                    continue
            yield CacheEntry(key, path, st.st_size, st.st_mtime, meta)

    def evict(self) -> None:
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        total = sum(e.size for e in entries)
        for e in entries:
            if total <= self.max_bytes:
                break
            for p in (e.path, self._meta_path(e.key)):
                try:
                    p.unlink()
                except OSError:
                    pass
            total -= e.size

    def clear(self) -> int:
        removed = 0
        for e in list(self.entries()):
            for p in (e.path, self._meta_path(e.key)):
                try:
                    p.unlink()
                except OSError:
                    pass
            removed += 1
        return removed

    def verify(self) -> list[tuple[str, str]]:
        """(key, problem) for each bad entry; bad entries are removed."""
        problems = []
        for e in list(self.entries()):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ok = self.load(e.key) is not None
            if not ok:
                problems.append((e.key, str(caught[0].message) if caught else "unreadable"))
        return problems
