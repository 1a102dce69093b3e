"""Tests of the wire codec (mariana.messages.codec)."""

from __future__ import annotations

import math
import random
import tracemalloc
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from mariana.errors import ProtocolError
from mariana.messages.codec import (
    ALLOWED_DTYPES,
    DEFAULT_CHUNK_BYTES,
    PROTOCOL_VERSION,
    Limits,
    decode,
    encode,
    nbytes,
    peek,
)

pytestmark = pytest.mark.timeout(60)

MiB = 1024 * 1024


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def random_array(dtype_str: str, shape: tuple, seed: int = 0) -> np.ndarray:
    g = rng(seed)
    dt = np.dtype(dtype_str)
    if dt.kind == "b":
        return g.integers(0, 2, size=shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return g.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        return g.standard_normal(size=shape).astype(dt)
    return np.asarray(g.standard_normal(size=shape) + 1j * g.standard_normal(size=shape)).astype(dt)


def as_bytes(frames: list) -> list[bytes]:
    """What a receiver that copies gets: plain bytes frames."""
    return [bytes(f) for f in frames]


def ext(spec: Any, code: int = 1) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb(spec))


def forge(header: object, *buffers: bytes) -> list:
    return [msgpack.packb(header, use_bin_type=True), *buffers]


def assert_same(a: object, b: object) -> None:
    """Deep equality where arrays must match dtype, shape and bytes exactly."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.ascontiguousarray(a).tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert type(a) is type(b) and a == b


def roundtrip(header: dict, **kw: Any) -> dict:
    out = decode(as_bytes(encode(header, **kw)))
    assert out.pop("v") == PROTOCOL_VERSION
    return out


# ----------------------------------------------------------------------------- round trips


def test_scalars_strings_bytes() -> None:
    h: dict[str, Any] = {"i": 7, "neg": -(2**63), "big": 2**64 - 1, "f": 1.5, "t": True, "n": None,
         "s": "héllo", "b": b"\x00\xff", "empty": "", "l": [], "d": {}}
    assert_same(h, roundtrip(h))


def test_nested_arrays_at_several_depths() -> None:
    a, b, c = random_array("<f8", (3, 4)), random_array("<i4", (5,), 1), random_array("|u1", (2, 2, 2), 2)
    h = {"kind": "msgs", "top": a,
         "msgs": [[0, 1, 3, {"payload": b, "more": [c, {"deep": [[a]]}]}], ("t", c)],
         b"raw": {"x": [1, b]}}
    out = roundtrip(h)
    assert_same(h, out)
    assert isinstance(out["msgs"][1], list)  # tuples become lists


def test_version_is_kept_and_caller_dict_untouched() -> None:
    h = {"a": 1, "v": 99}
    out = decode(encode(h))
    assert out == {"a": 1, "v": PROTOCOL_VERSION}
    assert h == {"a": 1, "v": 99}


@pytest.mark.parametrize("dtype_str", sorted(ALLOWED_DTYPES))
def test_every_allowed_dtype(dtype_str: str) -> None:
    arr = random_array(dtype_str, (7, 3), seed=5)
    assert arr.dtype.str == dtype_str
    assert_same({"a": arr}, roundtrip({"a": arr}))


@pytest.mark.parametrize("dtype_str", ["<f8", "|b1", "<c16"])
def test_zero_d_arrays(dtype_str: str) -> None:
    arr = random_array(dtype_str, (), seed=3)
    assert isinstance(arr, np.ndarray) and arr.ndim == 0
    out = roundtrip({"a": arr})
    assert out["a"].shape == ()
    assert_same({"a": arr}, out)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0, 2)])
def test_empty_arrays_use_no_frames(shape: tuple) -> None:
    arr = np.zeros(shape, dtype="<f4")
    frames = encode({"a": arr, "b": [arr]})
    assert len(frames) == 1
    assert_same({"a": arr, "b": [arr]}, roundtrip({"a": arr, "b": [arr]}))


def test_non_contiguous_arrays() -> None:
    base = random_array("<i8", (6, 8), seed=9)
    views = {"t": base.T, "s": base[::2, 1::3], "r": base[::-1], "f": np.asfortranarray(base)}
    assert not any(v.flags.c_contiguous for v in (views["t"], views["s"], views["r"]))
    assert_same(views, roundtrip(views))


def test_big_endian_array_is_swapped() -> None:
    arr = np.arange(10, dtype=">i4")
    out = roundtrip({"a": arr})["a"]
    assert out.dtype.str == "<i4"
    assert np.array_equal(out, arr)


def test_large_array_chunked_and_reassembled() -> None:
    arr = random_array("<f4", (5 * MiB // 4 * 4,), seed=11)  # 20 MiB
    assert arr.nbytes == 20 * MiB
    frames = encode({"a": arr}, chunk_bytes=4 * MiB)
    assert len(frames) == 6
    assert all(len(f) == 4 * MiB for f in frames[1:])
    out = decode(as_bytes(frames))["a"]
    assert out.tobytes() == arr.tobytes()
    assert not out.flags.writeable
    # an uneven tail chunk
    odd = arr[: (20 * MiB + 12) // 4 - 1]
    frames = encode({"a": odd}, chunk_bytes=4 * MiB)
    assert len(frames) == 1 + math.ceil(odd.nbytes / (4 * MiB))
    assert decode(frames)["a"].tobytes() == odd.tobytes()


def test_default_chunk_bytes() -> None:
    arr = np.zeros(DEFAULT_CHUNK_BYTES + 1, dtype=np.uint8)
    assert len(encode({"a": arr})) == 3
    assert len(encode({"a": arr[:-1]})) == 2


def test_numpy_scalars_become_python_scalars() -> None:
    h = {"f32": np.float32(2.5), "i64": np.int64(-3), "u8": np.uint8(200), "b": np.bool_(True),
         "f64": np.float64(0.25), "l": [np.int16(4), (np.float16(1.5),)]}
    out = roundtrip(h)
    assert out == {"f32": 2.5, "i64": -3, "u8": 200, "b": True, "f64": 0.25, "l": [4, [1.5]]}
    assert type(out["b"]) is bool and type(out["i64"]) is int and type(out["f32"]) is float


def test_cupy_like_array_moved_to_host() -> None:
    arr = random_array("<f4", (4, 4), seed=2)

    class FakeCupyArray:
        def get(self) -> np.ndarray:
            return arr

    FakeCupyArray.__module__ = "cupy._core.core"
    assert_same({"a": arr}, roundtrip({"a": FakeCupyArray()}))


@pytest.mark.parametrize("bad", [{1, 2}, lambda: 0, object(), np.array([object()]),
                                 np.array(["x"]), np.zeros(2, "datetime64[ns]"), np.complex128(1j)])
def test_unsupported_objects_raise_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="cannot encode"):
        encode({"x": [bad]})


def test_encode_argument_errors() -> None:
    with pytest.raises(TypeError):
        encode([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode({}, chunk_bytes=0)


def test_nbytes() -> None:
    arr = np.zeros(1000, dtype="<f8")
    frames = encode({"a": arr}, chunk_bytes=3000)
    assert nbytes(frames) == len(frames[0]) + 8000
    assert nbytes(as_bytes(frames)) == nbytes(frames)


# ----------------------------------------------------------------------------- zero copy


def test_encoded_frames_share_memory_with_source() -> None:
    arr = random_array("<f8", (1000,), seed=4)
    frames = encode({"a": arr}, chunk_bytes=1024)
    assert len(frames) == 1 + math.ceil(8000 / 1024)
    for f in frames[1:]:
        assert isinstance(f, memoryview)
        assert np.shares_memory(np.frombuffer(f, np.uint8), arr)
    single = encode({"a": arr})
    assert np.shares_memory(np.frombuffer(single[1], np.uint8), arr)


def test_decoded_single_frame_array_is_read_only_view() -> None:
    arr = random_array("<i4", (10, 10), seed=6)
    frames = as_bytes(encode({"a": arr}))
    out = decode(frames)["a"]
    assert np.shares_memory(out, np.frombuffer(frames[1], np.uint8))
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0, 0] = 1
    # also read-only over a writable buffer
    out2 = decode([frames[0], bytearray(frames[1])])["a"]
    assert not out2.flags.writeable


# ----------------------------------------------------------------------------- protocol errors


def expect(kind: str, frames: list, **kw: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode(frames, **kw)
    assert info.value.kind == kind, info.value
    return info.value


def valid_frames() -> list:
    return as_bytes(encode({"a": np.arange(8, dtype="<i8"), "b": [np.ones(3, "<f4")]}))


def test_frame_count_errors() -> None:
    frames = valid_frames()
    expect("frame_count", [])
    expect("frame_count", frames, limits=Limits(max_frames=2))
    expect("frame_count", frames[:-1])  # refers beyond the end
    expect("frame_count", frames + [b"extra"])  # unused frame
    twice = forge({"v": 1, "a": ext([1, 1, "<i8", [1]]), "b": ext([1, 1, "<i8", [1]])}, b"\0" * 8)
    expect("frame_count", twice)
    expect("frame_count", forge({"v": 1, "a": ext([0, 1, "|u1", [3]])}))  # the header frame
    expect("frame_count", forge({"v": 1, "a": ext([1, -1, "|u1", [0]])}, b""))
    expect("frame_count", [frames[0], 12345, frames[2]])  # not a buffer


@pytest.mark.parametrize(
    "frames",
    [
        [b"\xc1garbage"],
        [b"\x85\xa1v"],  # truncated
        forge([1, 2]),
        forge("str"),
        forge({"v": 1, 1: 2}),  # int map key
        forge({"v": 1, (1, 2): 2}),
        forge({"v": 1, "a": ext([1, 0, "<f8", [0]], code=2)}),
        forge({"v": 1, "a": msgpack.ExtType(1, b"\xc1")}),
        forge({"v": 1, "a": ext([1, 0, "<f8"])}),
        forge({"v": 1, "a": ext({"first": 1})}),
        forge({"v": 1, "a": ext([1.0, 0, "<f8", [0]])}),
        forge({"v": 1, "a": ext([True, 0, "<f8", [0]])}),
        forge({"v": 1, "a": ext([1, 0, b"<f8", [0]])}),
        forge({"v": 1, "a": ext([1, 0, "<f8", [-1]])}),
        forge({"v": 1, "a": ext([1, 0, "<f8", [2**64 - 1]])}),
        forge({"v": 1, "a": ext([1, 0, "<f8", "0"])}),
        forge({"v": 1, "a": ext([1, 0, "<f8", [0] * 33])}),  # ndim > max_ndim
        [msgpack.packb({"v": 1}) + b"\x00"],  # trailing bytes
    ],
)
def test_header_errors(frames: list) -> None:
    expect("header", frames)


def test_header_too_big() -> None:
    frames = as_bytes(encode({"s": "x" * 100}))
    expect("header", frames, limits=Limits(max_header_bytes=50))
    expect("header", frames, limits=Limits(max_str_len=10))
    assert decode(frames, limits=Limits(max_header_bytes=200))["s"] == "x" * 100


def test_header_nested_too_deep() -> None:
    expect("structure", [b"\x82\xa1v\x01\xa1d" + b"\x91" * 100_000 + b"\x00"])


@pytest.mark.parametrize("header", [{}, {"v": 2}, {"v": 0}, {"v": True}, {"v": "1"}, {"v": 1.0}])
def test_version_errors(header: dict) -> None:
    expect("version", forge(header))


def test_version_error_wins_over_array_errors() -> None:
    expect("version", forge({"v": 2, "a": ext([1, 5, "<f8", [3]], code=7)}))


@pytest.mark.parametrize("dtype_str", ["|O", "|V8", ">f8", ">i4", "<M8[ns]", "<U3", "[('a', '<i4')]", "<f16", "x"])
def test_dtype_errors(dtype_str: str) -> None:
    expect("dtype", forge({"v": 1, "a": ext([1, 1, dtype_str, [1]])}, b"\0" * 8))


def test_length_errors() -> None:
    frames = valid_frames()
    expect("length", [frames[0], frames[1][:-1], frames[2]])  # truncated buffer
    expect("length", [frames[0], frames[1] + b"\0", frames[2]])  # too long
    expect("length", forge({"v": 1, "a": ext([1, 0, "<f8", [2**40]])}))  # > max_array_bytes
    expect("length", frames, limits=Limits(max_array_bytes=32))
    # multi-frame: one chunk short
    big = as_bytes(encode({"a": np.arange(100, dtype="<f8")}, chunk_bytes=64))
    big[3] = big[3][:-8]
    expect("length", big)


# ----------------------------------------------------------------------------- fuzz


def fuzz_sources() -> list[list[bytes]]:
    g = rng(42)
    return [
        as_bytes(encode({"kind": "m", "step": 3, "msgs": [[0, 1, 2, {"x": g.standard_normal(5)}]]})),
        as_bytes(encode({"a": g.integers(0, 9, (4, 4), dtype="<i2"), "b": [np.zeros(0), np.bool_(1)]})),
        as_bytes(encode({"big": g.standard_normal(64).astype("<f4"), "s": "abc"}, chunk_bytes=48)),
        as_bytes(encode({"n": None, "l": [1, 2, [3, {"k": b"v"}]]})),
    ]


def mutate(frames: list[bytes], r: random.Random) -> list:
    frames = list(frames)
    op = r.randrange(9)
    i = r.randrange(len(frames))
    if op in (0, 1):  # flip bytes in the header
        h = bytearray(frames[0])
        for _ in range(r.randint(1, 4)):
            h[r.randrange(len(h))] = r.randrange(256)
        frames[0] = bytes(h)
    elif op == 2 and len(frames) > 1:
        del frames[i]
    elif op == 3:
        frames.insert(r.randrange(len(frames) + 1), frames[i])
    elif op == 4:
        frames[i] = frames[i][: r.randrange(len(frames[i]) + 1)]
    elif op == 5:
        frames.insert(r.randrange(len(frames) + 1), r.randbytes(r.randrange(64)))
    elif op == 6:
        frames[i] = r.randbytes(len(frames[i]))
    elif op == 7:
        frames[0] = frames[0] + r.randbytes(r.randrange(1, 8))
    else:
        r.shuffle(frames)
    return frames


def test_fuzz_never_raises_anything_but_protocol_error() -> None:
    r = random.Random(1234)
    sources = fuzz_sources()
    outcomes = {"ok": 0, "error": 0}
    for _ in range(2000):
        frames = mutate(r.choice(sources), r)
        if r.random() < 0.3:
            frames = mutate(frames, r)
        try:
            out = decode(frames)
        except ProtocolError as exc:
            assert exc.kind in {"frame_count", "header", "version", "dtype", "length"}
            outcomes["error"] += 1
        else:
            assert isinstance(out, dict)
            outcomes["ok"] += 1
    assert outcomes["error"] > 500


# ----------------------------------------------------------------------------- real zmq


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    try:
        yield ctx
    finally:
        ctx.term()
        # a zero-copy send of a large frame starts pyzmq's garbage-collector thread; stopped, so
        # that later tests in this process may still fork workers (cluster/forking.fork_is_safe)
        from zmq.utils.garbage import gc

        gc.stop()


def pair(ctx: zmq.Context, transport: str) -> tuple[zmq.Socket, zmq.Socket]:
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    for s in (a, b):
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 10_000)
    if transport == "inproc":
        a.bind("inproc://codec-test")
        b.connect("inproc://codec-test")
    else:
        port = a.bind_to_random_port("tcp://127.0.0.1")
        b.connect(f"tcp://127.0.0.1:{port}")
    return a, b


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
def test_zmq_round_trip(zctx: zmq.Context, transport: str) -> None:
    a, b = pair(zctx, transport)
    try:
        g = rng(7)
        header = {"kind": "msgs", "step": 1,
                  "msgs": [[0, 1, 0, {"x": g.standard_normal((50, 3))}],
                           [1, 2, 0, {"x": g.integers(0, 5, 1000).astype("<u2"), "e": np.zeros(0)}]],
                  "big": g.standard_normal(300_000).astype("<f4")}
        frames = encode(header, chunk_bytes=256 * 1024)
        assert len(frames) == 3 + math.ceil(1_200_000 / (256 * 1024))
        a.send_multipart(frames, copy=False)
        received = b.recv_multipart(copy=False)
        assert all(isinstance(f, zmq.Frame) for f in received)
        out = decode(received)
        assert out["v"] == PROTOCOL_VERSION
        del out["v"]
        assert_same(header, out)
        assert not out["msgs"][0][3]["x"].flags.writeable
    finally:
        a.close(linger=0)
        b.close(linger=0)


# -- how much a header may build (messages/bounds.py): refused before msgpack builds any of it --
def _header_with(values: bytes, count: int, key: bytes = b"msgs") -> bytes:
    """A header frame ``{"v": 1, key: [<count items, packed as values>]}`` built by hand (packing
    millions of Python objects first would cost what the decoder must not)."""
    return b"\x82\xa1v\x01" + bytes([0xA0 + len(key)]) + key + b"\xdd" + count.to_bytes(4, "big") + values


def _peak_bytes(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_flood_of_empty_lists_is_refused_before_any_is_built() -> None:
    n = 10_000_000  # 10 MB of header, 640 MB of lists once built
    head = _header_with(b"\x90" * n, n)
    err: list[ProtocolError] = []

    def refuse() -> None:
        with pytest.raises(ProtocolError) as info:
            decode([head])
        err.append(info.value)

    assert _peak_bytes(refuse) < 8 * MiB  # (chunks of the frame counted, not 640 MB of lists)
    assert err[0].kind == "structure" and "max_containers" in err[0].detail
    with pytest.raises(ProtocolError, match="max_containers"):  # from a zmq frame's buffer as well
        decode([memoryview(bytearray(head))])


def test_the_container_budget_is_exact_where_the_byte_count_cannot_vouch() -> None:
    """A str holding container-like bytes counts for nothing: the exact walk counts items."""
    lim = Limits(max_containers=1000)
    filler = "\x90" * 5000  # utf-8: 2 candidate bytes per char
    ok = msgpack.packb({"v": 1, "s": filler, "l": [[] for _ in range(998)]})
    assert len(decode([ok], limits=lim)["l"]) == 998  # 1000 containers: the header, "l", 998 lists
    over = msgpack.packb({"v": 1, "s": filler, "l": [[] for _ in range(999)]})
    assert "max_containers" in expect("structure", [over], limits=lim).detail


@pytest.mark.parametrize("item", [b"\x91\xa2ab", b"\x81\xa1k\x80", b"\x92\xcb" + bytes(8) + b"\x90"])
def test_a_flood_of_small_containers_among_other_items_is_refused(item: bytes) -> None:
    n = 20_000
    expect("structure", [_header_with(item * n, n)], limits=Limits(max_containers=10_000))


def test_a_huge_map_is_refused() -> None:
    n = 300_000  # {"k0": {}, "k1": {}, ...}: one map per entry
    entries = b"".join(b"\xa2k" + bytes([48 + i % 10]) + b"\x80" for i in range(n))
    head = b"\x82\xa1v\x01\xa1m\xdf" + n.to_bytes(4, "big") + entries
    assert "max_containers" in expect("structure", [head], limits=Limits(max_containers=100_000)).detail


def test_a_flood_of_values_is_refused() -> None:
    """-32 is one byte and a 28-byte int object once built: values are counted too."""
    n = 3_000_000
    err = expect("structure", [_header_with(b"\xe0" * n, n)], limits=Limits(max_items=1_000_000))
    assert "max_items" in err.detail


def test_nesting_is_bounded_by_max_depth() -> None:
    def nested(depth: int) -> bytes:  # the header dict, then lists of two: [], [...]; an empty list deepest
        return b"\x82\xa1v\x01\xa1d" + b"\x92\x90" * (depth - 2) + b"\x90"

    lim = Limits(max_depth=200)
    obj = decode([nested(200)], limits=lim)["d"]
    for _ in range(197):
        obj = obj[1]
    assert obj == [[], []]
    assert "max_depth" in expect("structure", [nested(201)], limits=lim).detail
    assert "max_depth" in expect("structure", [nested(1001)]).detail
    assert "max_depth" in expect("structure", [nested(100_000)]).detail
    with pytest.raises(ValueError, match="max_depth"):
        Limits(max_depth=1025)


def test_a_large_real_batch_still_decodes() -> None:
    """A vertex-mode batch of 300k messages (a list each), a big bytes payload among them."""
    msgs = [[f"v{i}", f"v{(i * 7919) % 300_000}", None, 0.5 + i] for i in range(300_000)]
    blob = np.random.default_rng(0).bytes(4 * MiB)  # ~600k container-like bytes: the exact walk runs
    out = decode(as_bytes(encode({"msgs": msgs, "blob": blob})), limits=Limits(max_containers=400_000))
    assert out["msgs"] == msgs and out["blob"] == blob


def test_peek_refuses_what_decode_refuses() -> None:
    n = 5_000_000
    with pytest.raises(ProtocolError, match="max_containers"):
        peek(_header_with(b"\x90" * n, n), "shm")


def test_an_oversized_array_reference_is_refused_before_it_is_unpacked() -> None:
    """An array reference's bytes are unpacked on their own: 5 million empty lists there are
    refused by their length, before that unpacking."""
    n = 5_000_000
    spec = b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n
    frames = forge({"v": 1, "a": msgpack.ExtType(1, spec)})
    err: list[ProtocolError] = []

    def refuse() -> None:
        with pytest.raises(ProtocolError) as info:
            decode(frames)
        err.append(info.value)

    assert _peak_bytes(refuse) < 32 * MiB  # the reference's bytes, not 320 MB of lists
    assert err[0].kind == "header" and "array reference of" in err[0].detail
