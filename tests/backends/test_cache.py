import os
import stat
import subprocess
import sys
import textwrap
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
