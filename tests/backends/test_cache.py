import os
import stat
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from litegpu.backends.cache import CompileCache, fingerprint, make_key, validate_model_token
from litegpu.errors import CacheError

KEY = make_key({"model": "m", "shape": [1, 2]})


def test_store_then_load_returns_payload(tmp_path):
    cache = CompileCache(tmp_path / "c")
    cache.store(KEY, b"payload" * 100, {"model": "m"})
    assert cache.load(KEY) == b"payload" * 100
    assert [e.key for e in cache.entries()] == [KEY]


def test_directory_is_private(tmp_path):
    CompileCache(tmp_path / "c")
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700


def test_key_changes_with_every_part():
    base = {"token": "t", "shapes": [[1, 3]], "accelerator": "cpu", "precision": "fp32", "jax": "0.10"}
    keys = {make_key(base)}
    for field, other in [("token", "u"), ("shapes", [[2, 3]]), ("accelerator", "gpu"), ("precision", "fp16"),
                         ("jax", "0.11")]:
        keys.add(make_key({**base, field: other}))
    assert len(keys) == 6


@pytest.mark.parametrize("damage", ["truncate_payload", "truncate_header", "flip_byte", "wrong_magic", "empty"])
def test_damaged_entry_is_discarded_not_loaded(tmp_path, damage):
    cache = CompileCache(tmp_path)
    cache.store(KEY, bytes(range(256)) * 10)
    path = tmp_path / f"{KEY}.bin"
    blob = bytearray(path.read_bytes())
    if damage == "truncate_payload":
        blob = blob[:-7]
    elif damage == "truncate_header":
        blob = blob[:20]
    elif damage == "flip_byte":
        blob[-100] ^= 0xFF
    elif damage == "wrong_magic":
        blob[:8] = b"XXXXXXXX"
    else:
        blob = bytearray()
    path.write_bytes(bytes(blob))
    with pytest.warns(RuntimeWarning, match="discarding"):
        assert cache.load(KEY) is None
    assert not path.exists()


def test_entry_written_for_another_key_is_rejected(tmp_path):
    cache = CompileCache(tmp_path)
    other = make_key({"other": 1})
    cache.store(other, b"x" * 64)
    (tmp_path / f"{other}.bin").rename(tmp_path / f"{KEY}.bin")
    with pytest.warns(RuntimeWarning, match="another key"):
        assert cache.load(KEY) is None


def test_world_writable_entry_is_ignored(tmp_path):
    cache = CompileCache(tmp_path)
    cache.store(KEY, b"x" * 64)
    os.chmod(tmp_path / f"{KEY}.bin", 0o666)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert cache.load(KEY) is None


def test_world_writable_directory_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(CacheError, match="writable by others"):
        CompileCache(d)


def test_lru_eviction_keeps_under_cap(tmp_path):
    cache = CompileCache(tmp_path, max_bytes=2500)
    keys = [make_key({"i": i}) for i in range(4)]
    for i, k in enumerate(keys):
        cache.store(k, bytes(1000))
        os.utime(tmp_path / f"{k}.bin", (1000 + i, 1000 + i))
    cache.evict()
    left = {e.key for e in cache.entries()}
    assert keys[0] not in left and keys[3] in left
    assert sum(e.size for e in cache.entries()) <= 2500


def test_clear_and_verify(tmp_path):
    cache = CompileCache(tmp_path)
    cache.store(KEY, b"ok" * 50)
    bad = make_key({"bad": 1})
    cache.store(bad, b"bad" * 50)
    (tmp_path / f"{bad}.bin").write_bytes(b"garbage")
    problems = cache.verify()
    assert [k for k, _ in problems] == [bad]
    assert cache.clear() == 1


@pytest.mark.parametrize("token", ["../evil", "a/b", "a\\b", "", ".", "..", "x" * 129, "a..b", "/abs", "tok\0en", 5])
def test_hostile_model_token_is_refused(token):
    with pytest.raises(CacheError):
        validate_model_token(token)


@pytest.mark.parametrize("token", ["mobilenet_v3", "model-1.2", "A"])
def test_plain_model_token_is_accepted(token):
    assert validate_model_token(token) == token


def test_fingerprint_streams_and_distinguishes():
    data = os.urandom(1 << 20)
    assert fingerprint(data, chunk=4096) == fingerprint(data)
    assert fingerprint(data) != fingerprint(data[:-1] + bytes([data[-1] ^ 1]))


def test_two_processes_filling_the_same_cache_both_succeed(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from litegpu.backends.cache import CompileCache, make_key
        cache = CompileCache({str(tmp_path)!r})
        for i in range(50):
            key = make_key({{"i": i % 5}})
            cache.store(key, bytes([i % 5]) * 4096)
            got = cache.load(key)
            assert got is None or len(got) == 4096, "half-written entry seen"
        print("ok")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        assert out.strip() == b"ok"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert CompileCache(tmp_path).verify() == []


# ---- where the cache lives, how big it may grow --------------------------------------------------

def test_the_default_directory_follows_the_environment(monkeypatch, tmp_path):
    from litegpu.backends.cache import default_cache_dir

    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("LITEGPU_CACHE_DIR", "")
    assert default_cache_dir() is None  # off
    monkeypatch.delenv("LITEGPU_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert default_cache_dir() == tmp_path / "xdg" / "litegpu"  # where the platform keeps caches
    else:
        assert default_cache_dir().name in ("litegpu", "Cache")


@pytest.mark.parametrize("text, expected", [("4G", 4 << 30), ("500M", 500 << 20), ("64k", 64 << 10),
                                             ("1.5GiB", 3 << 29), ("1234", 1234), (" 2 mb ", 2 << 20)])
def test_sizes_read_as_people_write_them(text, expected):
    from litegpu.backends.cache import parse_size

    assert parse_size(text) == expected


def test_a_bad_size_bound_says_so(monkeypatch):
    from litegpu.backends.cache import max_bytes_from_environment, parse_size

    with pytest.raises(CacheError, match="4G, 500M"):
        parse_size("lots")
    monkeypatch.setenv("LITEGPU_CACHE_MAX_SIZE", "-1G")
    with pytest.raises(CacheError, match="LITEGPU_CACHE_MAX_SIZE"):
        max_bytes_from_environment()
    monkeypatch.setenv("LITEGPU_CACHE_MAX_SIZE", "3K")
    assert max_bytes_from_environment() == 3 << 10


def test_the_size_bound_from_the_environment_evicts_the_least_recently_used(monkeypatch, tmp_path):
    monkeypatch.setenv("LITEGPU_CACHE_MAX_SIZE", "3500")
    cache = CompileCache(tmp_path)
    keys = [make_key({"i": i}) for i in range(3)]
    for i, k in enumerate(keys):
        cache.store(k, bytes(1000))
        os.utime(tmp_path / f"{k}.bin", (1000 + i, 1000 + i))
    assert cache.load(keys[0]) is not None  # used now: the most recent
    cache.store(make_key({"i": 3}), bytes(1000))
    left = {e.key for e in cache.entries()}
    assert keys[0] in left and keys[1] not in left and cache.size() <= 3500


def test_entries_say_what_they_are(tmp_path):
    cache = CompileCache(tmp_path)
    cache.store(KEY, b"x", {"engine": "xla", "what": "compiled program", "source": "/models/m.tflite"})
    (entry,) = cache.entries()
    assert (entry.engine, entry.what, entry.source) == ("xla", "compiled program", "/models/m.tflite")


def test_a_new_directory_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        CompileCache(tmp_path / "a" / "c")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "c").stat().st_mode) == 0o700


# ---- several processes --------------------------------------------------------------------------

_HOLD = """
import sys, time
from litegpu.backends.cache import CompileCache
cache = CompileCache(sys.argv[1])
with cache.building(sys.argv[2]):
    print("holding", flush=True)
    time.sleep(float(sys.argv[3]))
    cache.store(sys.argv[2], b"built by the holder")
"""


def test_a_process_computing_an_entry_makes_the_others_wait_for_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), KEY, "1.0"], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "holding"
    cache = CompileCache(tmp_path)
    assert cache.load(KEY) is None
    start = time.monotonic()
    with cache.building(KEY):  # what a second process does before computing the same entry
        waited = time.monotonic() - start
        found = cache.load(KEY)
    holder.wait(timeout=60)
    assert waited > 0.3 and found == b"built by the holder"


def test_a_holder_that_dies_releases_its_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), KEY, "600"], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "holding"
    holder.kill()
    holder.wait(timeout=60)
    start = time.monotonic()
    with CompileCache(tmp_path).building(KEY):
        assert time.monotonic() - start < 30


_SLOW_WRITER = """
import os, sys, time
from litegpu.backends import cache as module
real_fdopen = os.fdopen

class Slow:
    def __init__(self, f):
        self.f = f
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()
    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        print("half written", flush=True)
        time.sleep(600)
        self.f.write(data[len(data) // 2:])

module.os.fdopen = lambda fd, mode: Slow(real_fdopen(fd, mode))
module.CompileCache(sys.argv[1]).store(sys.argv[2], bytes(range(256)) * 4096)
"""


def test_a_writer_killed_mid_write_leaves_no_entry_anyone_reads(tmp_path):
    cache = CompileCache(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(tmp_path), KEY], stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout.readline().strip() == "half written"  # the description, half of it
    writer.kill()
    writer.wait(timeout=60)
    partial = list(tmp_path.glob(".*.tmp"))
    assert partial and partial[0].stat().st_size > 0  # the half-written temp file is there ...
    assert cache.load(KEY) is None and list(cache.entries()) == []  # ... and nobody reads it
    for p in partial:
        os.utime(p, (1, 1))  # a writer dead this long ago
    cache.evict()
    assert not list(tmp_path.glob(".*.tmp"))
    cache.store(KEY, b"rebuilt")
    assert cache.load(KEY) == b"rebuilt"


def test_old_lock_files_are_tidied_away(tmp_path):
    cache = CompileCache(tmp_path)
    with cache.building(KEY):
        pass
    (lock,) = (tmp_path / "locks").iterdir()
    cache.evict()
    assert lock.exists()  # recent: perhaps about to be taken again
    os.utime(lock, (1, 1))
    cache.evict()
    assert not lock.exists()
