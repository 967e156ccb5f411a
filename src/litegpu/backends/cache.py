"""The compile cache: what a later start of the same model can skip.

On by default, where the platform keeps caches (``default_cache_dir``: ``$LITEGPU_CACHE_DIR``, else
``~/.cache/litegpu`` on Linux); ``LITEGPU_CACHE_DIR=""`` or ``Options(compile_cache=False)`` turns it off.

Entries are opaque payloads (serialized XLA executables, OpenVINO blobs, the planner's verdicts) stored under
a key that covers everything changing the result (model token, signature, input shapes, accelerator and
device kind, precision, litegpu and engine versions).

Nothing read back is trusted: every entry carries a header with a magic, the key it was written for, its
payload length and an xxh3 checksum; a truncated, corrupt or mismatching entry is deleted, reported and
rebuilt.  The directory is private (0700); a file not owned by the user, or writable by others, is ignored
with a warning.  Writes go to a temp file renamed into place, so no process ever reads half an entry, and
a process that computes an entry holds a lock on its key (``building``), so that processes starting together
(a server's workers, a Ray job's actors) compute it once and the others read it.  The cache keeps under a
size bound (``LITEGPU_CACHE_MAX_SIZE``, 4 GiB by default) by evicting the least recently used entries.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import struct
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import xxhash

from .._lazy import LazyLogger
from ..errors import CacheError

log = LazyLogger("litegpu.cache")
T = TypeVar("T")

MAGIC = b"LGPUC001"
_HEADER = struct.Struct("<8s32sQ16s")  # magic, key (hex of 128-bit digest), payload length, xxh3_128 of payload
DEFAULT_MAX_BYTES = 4 << 30
CACHE_DIR_VARIABLE = "LITEGPU_CACHE_DIR"
CACHE_SIZE_VARIABLE = "LITEGPU_CACHE_MAX_SIZE"
# How long a process waits for another one computing the same entry before computing it itself: a big
# model's compile takes minutes, and a holder that dies releases its lock at once.
LOCK_WAIT_S = 600.0
# A temp file this old belongs to a writer that died mid-write: removed when the cache is tidied.
STALE_TEMP_S = 3600.0
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_KEY = re.compile(r"[0-9a-f]{32}")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def default_cache_dir() -> Path | None:
    """Where the compile cache lives unless an option names a directory: ``$LITEGPU_CACHE_DIR`` (empty: no
    cache), else the platform's user cache directory (``~/.cache/litegpu`` on Linux, honouring
    ``$XDG_CACHE_HOME``; ``~/Library/Caches/litegpu`` on macOS; ``%LOCALAPPDATA%\\litegpu\\Cache`` on Windows)."""
    if CACHE_DIR_VARIABLE in os.environ:
        chosen = os.environ[CACHE_DIR_VARIABLE].strip()
        return Path(chosen).expanduser() if chosen else None
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("litegpu", appauthor=False))


def parse_size(text: str | int) -> int:
    """Bytes from ``4G``, ``500M``, ``64k``, ``1.5GiB`` or a plain number of bytes (powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    found = _SIZE.match(str(text))
    if found is None:
        raise CacheError(f"cache size {text!r}: give bytes, or a number with K, M, G or T (e.g. 4G, 500M)")
    number, unit = float(found.group(1)), found.group(2).lower()
    return int(number * (1 << (10 * " kmgt".index(unit or " "))))


def max_bytes_from_environment() -> int:
    """The cache's size bound: ``$LITEGPU_CACHE_MAX_SIZE`` (``4G``, ``500M``), else ``DEFAULT_MAX_BYTES``."""
    text = os.environ.get(CACHE_SIZE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except CacheError as e:
        raise CacheError(f"{CACHE_SIZE_VARIABLE}: {e}") from None


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

    @property
    def engine(self) -> str:
        """The engine whose entry this is ("xla", "openvino", "litert", "iree"), or "" where unrecorded."""
        return str(self.meta.get("engine") or "")

    @property
    def what(self) -> str:
        """What the entry holds: "compiled program", "engine choice", "thread count", ..."""
        return str(self.meta.get("what") or "")

    @property
    def source(self) -> str:
        """The model file the entry was made for ("" where unrecorded)."""
        return str(self.meta.get("source") or self.meta.get("model") or "")


class CompileCache:
    def __init__(self, directory: str | os.PathLike, max_bytes: int | None = None):
        self.directory = Path(directory).expanduser()
        self.max_bytes = max_bytes_from_environment() if max_bytes is None else max_bytes
        self._prepare_directory()

    # -- safety -----------------------------------------------------------------
    def _prepare_directory(self) -> None:
        existed = self.directory.is_dir()
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not existed:
                os.chmod(self.directory, 0o700)  # whatever the umask or a parent's mode
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
        if not _KEY.fullmatch(key):
            raise CacheError(f"invalid cache key {key!r}")
        return self.directory / f"{key}.bin"

    def _meta_path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def _lock_path(self, key: str) -> Path:
        return self.directory / "locks" / f"{self._entry_path(key).stem}.lock"

    def discard(self, key: str, reason: str) -> None:
        warnings.warn(f"litegpu compile cache: discarding entry {key} in {self.directory}: {reason}; "
                      "it will be rebuilt", RuntimeWarning, stacklevel=3)
        self._remove(key)

    def remove(self, key: str) -> None:
        """Drop an entry that is out of date, not damaged (a newer one of its kind replaces it): no warning."""
        self._remove(key)

    def _remove(self, key: str) -> None:
        for p in (self._entry_path(key), self._meta_path(key)):
            with contextlib.suppress(OSError):
                p.unlink()

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
        except FileNotFoundError:  # evicted or replaced by another process just now
            return None
        except OSError as e:
            self.discard(key, f"unreadable ({e.strerror})")
            return None
        problem = _problem(blob, key)
        if problem is not None:
            self.discard(key, problem)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # last use, for LRU eviction
        return blob[_HEADER.size:]

    def store(self, key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> None:
        """Keep ``payload`` under ``key``; ``meta`` says what it is for ``litegpu cache ls`` ("engine", "what",
        "source": the model file)."""
        header = _HEADER.pack(MAGIC, key.encode("ascii"), len(payload), xxhash.xxh3_128_digest(payload))
        info = {"key": key, "created": time.time(), "size": len(payload), **(meta or {})}
        # the description first: a reader that finds the entry finds it described
        self._write_atomic(self._meta_path(key), json.dumps(info, sort_keys=True, default=str).encode())
        self._write_atomic(self._entry_path(key), header + payload)
        self.evict()

    def _write_atomic(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("litegpu compile cache: could not write %s: %s", path, e)

    @contextlib.contextmanager
    def building(self, key: str) -> Iterator[None]:
        """Held while this process computes the entry ``key``: another process about to compute the same
        entry waits here, then finds it stored (callers look the entry up again inside the block).  An flock,
        so a holder that dies releases it; after ``LOCK_WAIT_S`` a waiter computes the entry itself."""
        from filelock import FileLock, Timeout

        path = self._lock_path(key)
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            lock = FileLock(str(path), timeout=LOCK_WAIT_S)
            lock.acquire()
        except Timeout:
            warnings.warn(f"litegpu compile cache: another process has been computing entry {key} for "
                          f"{LOCK_WAIT_S:.0f} s; computing it here too", RuntimeWarning, stacklevel=3)
            lock = None
        except OSError as e:  # a read-only cache: compute without the lock
            log.warning("litegpu compile cache: cannot lock %s: %s", path, e)
            lock = None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def entries(self) -> Iterator[CacheEntry]:
        for path in sorted(self.directory.glob("*.bin")):
            key = path.stem
            try:
                st = path.stat()
            except OSError:  # removed meanwhile
                continue
            try:
                meta = json.loads(self._meta_path(key).read_text())
            except (OSError, ValueError):
                meta = {}
            yield CacheEntry(key, path, st.st_size, st.st_mtime, meta if isinstance(meta, dict) else {})

    def size(self) -> int:
        return sum(e.size for e in self.entries())

    def evict(self, max_bytes: int | None = None) -> list[CacheEntry]:
        """Remove the least recently used entries until the cache holds at most ``max_bytes`` (default: its
        bound), and temp files that writers which died left behind; returns the entries removed."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        self._remove_stale_temp_files()
        entries = sorted(self._sizes(), key=lambda e: e[2])
        total = sum(size for _, size, _ in entries)
        removed = []
        for key, size, used in entries:
            if total <= bound:
                break
            self._remove(key)
            removed.append(CacheEntry(key, self._entry_path(key), size, used, {}))
            total -= size
        return removed

    def _sizes(self) -> list[tuple[str, int, float]]:
        """(key, bytes, last use) of every entry, from the directory listing alone (no descriptions read)."""
        found = []
        with contextlib.suppress(OSError), os.scandir(self.directory) as listing:
            for item in listing:
                if item.name.endswith(".bin") and _KEY.fullmatch(item.name[:-4]):
                    with contextlib.suppress(OSError):
                        st = item.stat()
                        found.append((item.name[:-4], st.st_size, st.st_mtime))
        return found

    def _remove_stale_temp_files(self) -> None:
        """Temp files of writers that died mid-write, descriptions whose entry never came (a writer killed between
        the two files), and lock files (an flock lives in the open file, not the name), once ``STALE_TEMP_S`` old."""
        now = time.time()
        for folder in (self.directory, self.directory / "locks"):
            with contextlib.suppress(OSError), os.scandir(folder) as listing:
                for item in listing:
                    orphan = item.name.endswith(".json") and not os.path.exists(item.path[:-5] + ".bin")
                    if orphan or item.name.endswith((".tmp", ".lock")):
                        with contextlib.suppress(OSError):
                            if now - item.stat().st_mtime > STALE_TEMP_S:
                                os.unlink(item.path)

    def clear(self) -> int:
        removed = 0
        for e in list(self.entries()):
            self._remove(e.key)
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


def found_or_made(cache: CompileCache | None, key: str | None, find: Callable[[], T | None],
                  make: Callable[[], T]) -> T:
    """What ``find()`` finds under ``key`` (None: nothing usable), else ``make()``, which computes and stores it,
    run holding the entry's lock after looking again: a process starting beside this one (a server's workers) may
    have made it meanwhile, and the others wait for the one making it.  Without a cache, ``make()``."""
    found = find()
    if found is not None:
        return found
    if cache is None or key is None:
        return make()
    with cache.building(key):
        found = find()
        return found if found is not None else make()


def open_default_cache() -> CompileCache | None:
    """The cache at ``default_cache_dir()``; None where it is turned off, or cannot be used (a read-only home
    directory: a warning says so, and models run without it)."""
    directory = default_cache_dir()
    if directory is None:
        return None
    try:
        return CompileCache(directory)
    except CacheError as e:
        warnings.warn(f"litegpu compile cache: {e}; running without it (set {CACHE_DIR_VARIABLE} to another "
                      "directory, or to an empty string to turn it off)", RuntimeWarning, stacklevel=3)
        return None


def _problem(blob: bytes, key: str) -> str | None:
    """What is wrong with an entry's bytes read back for ``key`` (None: nothing)."""
    if len(blob) < _HEADER.size:
        return "truncated header"
    magic, stored_key, length, digest = _HEADER.unpack_from(blob)
    payload = memoryview(blob)[_HEADER.size:]
    if magic != MAGIC:
        return "not a litegpu cache entry (or written by another format version)"
    if stored_key.decode("ascii", "replace") != key:
        return "written for another key"
    if length != len(payload):
        return f"truncated: {len(payload)} of {length} payload bytes"
    if xxhash.xxh3_128_digest(payload) != digest:
        return "checksum mismatch (corrupt)"
    return None
