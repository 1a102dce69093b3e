"""The part format: round trips, shared arrays, refusals and damage, on real files."""

from __future__ import annotations

import hashlib
import io

import msgpack
import numpy as np
import pytest

from mariana.errors import StorageError
from mariana.storage.partfile import MAGIC, pack, read_part, unpack, write_part

pytestmark = pytest.mark.timeout(60)


def _state(rng: np.random.Generator) -> dict:
    big = rng.standard_normal(3_000_000).astype(np.float32)  # > one 8 MiB hashing chunk
    structured = np.zeros(3, [("a", "<i4"), ("b", "<f8", (2,))])
    structured["a"] = [1, 2, 3]
    return {"big": big, "same": big, "strided": big[::3], "scalar": np.array(2.5), "int": np.array(7, np.int64),
            "empty": np.zeros((0, 4), np.float32), "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
            "big_endian": np.arange(5, dtype=">i4"), "structured": structured, "bool": np.array([True, False]),
            "plain": {"n": 3, "x": 0.5, "s": "text", "b": b"\x00\x01", "none": None, 4: "int key"},
            "nested": [[np.ones(3, np.uint8), (1, 2)]]}


def test_round_trip_of_every_kind_of_value(tmp_path):
    state = _state(np.random.default_rng(0))
    path = tmp_path / "a.part"
    with open(path, "wb") as f:
        size, sha = write_part(f, state)
    data = path.read_bytes()
    assert size == len(data) and sha == hashlib.sha256(data).hexdigest() and data[:8] == MAGIC
    with open(path, "rb", buffering=0) as f:
        back = read_part(f, str(path), size, sha)
    for key in ("big", "strided", "scalar", "int", "empty", "fortran", "big_endian", "structured", "bool"):
        assert back[key].dtype == state[key].dtype and back[key].shape == state[key].shape, key
        assert np.array_equal(back[key], state[key]), key
        assert back[key].flags.writeable and back[key].flags.owndata, key  # vertices update state in place
    assert back["plain"] == state["plain"]
    assert np.array_equal(back["nested"][0][0], np.ones(3, np.uint8)) and back["nested"][0][1] == [1, 2]
    assert unpack(pack(state))["plain"] == state["plain"]


def test_an_array_referenced_twice_is_stored_once_and_comes_back_shared():
    a = np.arange(1_000_000, dtype=np.float64)
    once = len(pack({"a": a}))
    twice = pack({"a": a, "b": a, "inbox": [[0, 1, "g", a]]})
    assert len(twice) - once < 200  # the index grows, the data does not
    back = unpack(twice)
    assert back["a"] is back["b"] is back["inbox"][0][3]
    view = unpack(pack({"a": a, "view": a[:10]}))  # a view of different shape is its own array
    assert view["view"] is not view["a"] and np.array_equal(view["view"], a[:10])


def test_every_record_is_a_plain_npy_at_an_aligned_offset():
    data = pack({"x": np.arange(10, dtype=np.int16), "y": np.ones((2, 3))})
    starts = [i for i in range(len(data)) if data.startswith(b"\x93NUMPY", i)]
    assert len(starts) == 2 and all(s % 64 == 0 for s in starts)
    assert np.array_equal(np.load(io.BytesIO(data[starts[0]:])), np.arange(10, dtype=np.int16))
    assert np.array_equal(np.load(io.BytesIO(data[starts[1]:])), np.ones((2, 3)))


def test_object_arrays_are_refused_on_both_sides():
    with pytest.raises(StorageError, match=r"/w/x: an object array"):
        pack({"w": {"x": np.array([1, None], dtype=object)}})
    # a file that claims an object array is never loaded (np.load would need pickle)
    good = pack({"x": np.zeros(2, np.int8)})
    bad = good.replace(b"'|i1'", b"'|O' ")
    with pytest.raises(StorageError, match="object arrays are refused"):
        unpack(bad)


def test_values_msgpack_cannot_hold_are_a_clear_error():
    with pytest.raises(StorageError, match="cannot store this state"):
        pack({"f": object()})


@pytest.mark.parametrize("damage", ["flip-data", "flip-index", "truncate", "extra", "magic"])
def test_damage_is_detected_before_anything_is_returned(damage):
    data = bytearray(pack({"x": np.arange(100_000, dtype=np.float32), "n": 1}))
    size, sha = len(data), hashlib.sha256(data).hexdigest()
    if damage == "flip-data":
        data[-1000] ^= 1
    elif damage == "flip-index":
        data[20] ^= 0xFF
    elif damage == "truncate":
        del data[-10:]
    elif damage == "extra":
        data += b"\0"
    else:
        data[:8] = b"NOTAPART"
    with pytest.raises(StorageError, match=r"^worker-0\.part: "):
        read_part(io.BytesIO(bytes(data)), "worker-0.part", size, sha)


def test_a_lying_index_cannot_make_the_reader_allocate_wildly():
    index = msgpack.packb({"meta": {}, "arrays": [1 << 60]})
    data = MAGIC + len(index).to_bytes(8, "little") + index
    with pytest.raises(StorageError, match="runs past"):
        read_part(io.BytesIO(data), "p", size=len(data))
    huge = MAGIC + (1 << 62).to_bytes(8, "little")
    with pytest.raises(StorageError, match="index"):
        read_part(io.BytesIO(huge), "p")


def test_npz_blobs_of_earlier_versions_still_read():
    meta = msgpack.packb({"v": {"__npy__": "a0"}, "n": 2}, use_bin_type=True)
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(meta, np.uint8), a0=np.arange(4))
    back = unpack(buf.getvalue())
    assert back["n"] == 2 and np.array_equal(back["v"], np.arange(4))
