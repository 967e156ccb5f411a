"""Getting model bytes in and out of files: memory maps, identifiers, atomic writes.

Two file formats share this layer: TFLite (``TFL3``) and Samsung ONE's circle (``CIR0``).  A file's
identifier says which schema decodes it; the rest (memory maps, the FlatBuffer walk, the data past
it) is the same for both."""

from __future__ import annotations

import io
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Union

from ..errors import ModelFormatError, WriteError
from .codec import Decoder, Encoder
from .schema import Schema, load_circle_schema, load_schema

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO]

FILE_IDENTIFIER = b"TFL3"
CIRCLE_FILE_IDENTIFIER = b"CIR0"


@dataclass(frozen=True)
class FileFormat:
    """One FlatBuffers model format: its name, identifier, usual suffix and schema."""

    name: str              # "tflite" or "circle": what ir.Model.file_format holds
    identifier: bytes
    suffix: str
    load: Callable[[], Schema]
    # Model.version in files of this format: the official interpreter refuses TFLite files without 3;
    # circle files (tico's, ONE's tflite2circle's) hold 0.
    schema_version: int

    @property
    def schema(self) -> Schema:
        return self.load()


TFLITE = FileFormat("tflite", FILE_IDENTIFIER, ".tflite", load_schema, 3)
CIRCLE = FileFormat("circle", CIRCLE_FILE_IDENTIFIER, ".circle", load_circle_schema, 0)
FORMATS = {f.name: f for f in (TFLITE, CIRCLE)}


def file_format(name: str) -> FileFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ModelFormatError(f"unknown model format {name!r} (known: {', '.join(FORMATS)})") from None


def format_for_path(path: str | os.PathLike, default: str = "tflite") -> FileFormat:
    """The format a file name asks for: ``.circle`` is circle, anything else ``default``."""
    return CIRCLE if str(path).lower().endswith(CIRCLE.suffix) else file_format(default)


def _format_for_identifier(buffer: Any, where: str) -> FileFormat:
    if len(buffer) < 8:
        raise ModelFormatError(f"{where}: header: file is {len(buffer)} bytes, too short to hold a FlatBuffer")
    found = bytes(buffer[4:8])
    for fmt in FORMATS.values():
        if found == fmt.identifier:
            return fmt
    raise ModelFormatError(f"{where}: header: file identifier is {found!r}, expected {FILE_IDENTIFIER!r} "
                           f"(.tflite) or {CIRCLE_FILE_IDENTIFIER!r} (.circle)")


@dataclass
class RawModel:
    """A decoded (and structurally verified) Model table plus the bytes behind it."""

    root: dict
    buffer: Any          # bytes, bytearray, memoryview or mmap: constant data are views into it
    where: str           # path or "<bytes>", for error messages
    flatbuffer_end: int  # one past the last byte the FlatBuffer part uses
    file_format: FileFormat = TFLITE

    @property
    def size(self) -> int:
        return len(self.buffer)

    @property
    def schema(self) -> Schema:
        return self.file_format.schema


def open_source(source: ModelSource) -> tuple[Any, str]:
    """The model's bytes (memory-mapped for paths) and a name for messages."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return source, "<bytes>"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise ModelFormatError(f"{path}: file is empty")
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), str(path)
        except FileNotFoundError:
            raise ModelFormatError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ModelFormatError(f"{path}: is a directory, not a .tflite file") from None
        except PermissionError as e:
            raise ModelFormatError(f"{path}: cannot be read ({e.strerror})") from None
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise ModelFormatError("file object must be opened in binary mode")
        return data, getattr(source, "name", "<file object>")
    raise ModelFormatError(f"cannot read a model from {type(source).__name__}; "
                           "give a path, bytes or a binary file object")


class _TrackingDecoder(Decoder):
    """Remembers the furthest byte the FlatBuffer part reaches (to spot overlaps)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.end = 0

    def _check(self, pos: int, length: int, path: str, what: str) -> None:
        # the decoder's hottest call (once per value read): the base check and the furthest byte, inline
        end = pos + length
        if pos < 0 or length < 0 or end > self.size:
            super()._check(pos, length, path, what)  # raises, naming the place
        if end > self.end:
            self.end = end


def decode_model(source: ModelSource) -> RawModel:
    """Decode and structurally verify a .tflite or .circle file (its identifier says which)."""
    buffer, where = open_source(source)
    fmt = _format_for_identifier(buffer, where)
    decoder = _TrackingDecoder(buffer, where, fmt.schema)
    try:
        root = decoder.root("Model", fmt.identifier)
    except RecursionError:
        raise ModelFormatError(f"{where}: tables nest too deeply") from None
    return RawModel(root, buffer, where, decoder.end, fmt)


def encode_model(root: dict, size_hint: int = 0, fmt: FileFormat = TFLITE) -> bytearray:
    """``size_hint``: the bytes the buffers will take; the builder starts that big instead of doubling its
    way there (each doubling copies everything written so far: 0.26 s of a 100 MB model's 0.53 s)."""
    return Encoder(fmt.schema, initial_size=max(1 << 16, size_hint + (1 << 20))).finish(
        "Model", root, fmt.identifier)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Write through a temp file in the same folder, then rename over ``path``.

    A failure (or a crash) leaves any earlier file at ``path`` untouched.  The file gets the permissions any new
    file gets (0666 less the umask: readable by others where the user's umask says so), not ``mkstemp``'s 0600:
    a model written for a colleague must be readable by them.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = _new_temp_file(path, folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise WriteError(f"{path}: write failed ({e.strerror or e})") from None
        raise


def _new_temp_file(path: Path, folder: Path) -> tuple[int, str]:
    """A new file beside ``path`` that no other writer has (a random name, created exclusively)."""
    import secrets

    for _ in range(16):
        tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), str(tmp)
        except FileExistsError:
            continue
        except OSError as e:
            raise WriteError(f"{path}: cannot create a file in {folder} ({e.strerror})") from None
    raise WriteError(f"{path}: cannot create a temp file in {folder} (every name tried exists)")


def write_bytes(path: str | os.PathLike, data: bytes | bytearray | io.BytesIO) -> None:
    atomic_write(path, lambda f: f.write(data))


def _mapped_file(array: Any) -> mmap.mmap | None:
    """The read-only file map that ``array``'s memory belongs to, if any (follows ``.base``/``.obj``)."""
    seen = array
    for _ in range(16):
        seen = getattr(seen, "base", None) if not isinstance(seen, memoryview) else seen.obj
        if seen is None:
            return None
        if isinstance(seen, mmap.mmap):
            return seen
    return None


def release_file_pages(array: Any) -> int:
    """Drop from this process the pages of a file map that hold ``array``, once its values have been
    copied elsewhere (a weight copied to the GPU, or to an aligned host buffer by the CPU runtime):
    they are clean pages of a read-only map, so dropping them costs nothing and a later read faults
    them in again from the file with the same bytes.  Only whole pages inside ``array`` are dropped
    (a neighbour's bytes may share the edge pages).  Returns the bytes released (0 where ``array``
    is not in a file map, or the platform has no ``madvise``)."""
    import numpy as np

    mapped = _mapped_file(array)
    if mapped is None or not hasattr(mapped, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    start = np.asarray(array).ctypes.data - np.frombuffer(mapped, np.uint8).ctypes.data
    end = start + np.asarray(array).nbytes
    first, last = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
    if start < 0 or end > len(mapped) or last <= first:
        return 0
    mapped.madvise(mmap.MADV_DONTNEED, first, last - first)
    return last - first
