"""Unit tests of the edge-list reader (mariana.storage.edgelist)."""

from __future__ import annotations

import random
import uuid

import fsspec
import numpy as np
import pytest

from mariana.errors import UsageError
from mariana.storage import edgelist
from mariana.storage.edgelist import (EdgeList, _parse_lines, _parse_numeric, canonical_ints, example_graph_url,
                                   load_edges, numeric_edges, numeric_ids, parse_edges, plain_decimals)

pytestmark = pytest.mark.timeout(120)

URL = "mem://test.e"


def edges_of(el: EdgeList) -> list[tuple[str, str, float]]:
    """The parsed edges as (src id, dst id, weight) in file order."""
    return [(el.ids[s], el.ids[d], w) for s, d, w in zip(el.src.tolist(), el.dst.tolist(), el.weight.tolist())]


def unique_memory_url(name: str = "g.e") -> str:
    return f"memory://mariana-test-edgelist-{uuid.uuid4().hex}/{name}"


# ----------------------------------------------------------------------------------------------
# parse_edges
# ----------------------------------------------------------------------------------------------
def test_two_and_three_fields_and_default_weight():
    el = parse_edges("a b\nb c 2.5\nc a -1\n", URL)
    assert el.ids == ["a", "b", "c"]
    assert edges_of(el) == [("a", "b", 1.0), ("b", "c", 2.5), ("c", "a", -1.0)]
    assert el.n == 3
    assert el.src.dtype == np.int64 and el.dst.dtype == np.int64 and el.weight.dtype == np.float64
    assert el.lineno.tolist() == [1, 2, 3]
    assert el.url == URL


def test_full_line_and_trailing_comments_and_blank_lines():
    text = (
        "# header comment\n"
        "\n"
        "   # indented comment\n"
        "a b 3   # trailing comment with 4 5 6 fields\n"
        "   \t  \n"
        "b c#comment right after a token\n"
        "#c d\n"
        "c d 7#x\n"
        "\n"
    )
    el = parse_edges(text, URL)
    assert edges_of(el) == [("a", "b", 3.0), ("b", "c", 1.0), ("c", "d", 7.0)]
    assert el.lineno.tolist() == [4, 6, 8]  # line numbers count comments and blank lines
    assert el.ids == ["a", "b", "c", "d"]


def test_tabs_mixed_whitespace_and_crlf():
    el = parse_edges("a\tb\t2\r\n  b   \t c  \r\nc\ta\t 0.5\t\r\n", URL)
    assert edges_of(el) == [("a", "b", 2.0), ("b", "c", 1.0), ("c", "a", 0.5)]
    assert el.lineno.tolist() == [1, 2, 3]


def test_ids_sorted_in_string_order_and_dst_only_vertices_exist():
    el = parse_edges("10 9\n9 2\n2 100\nv17 v2\n", URL)
    assert el.ids == sorted(["10", "9", "2", "100", "v17", "v2"])
    assert el.ids == ["10", "100", "2", "9", "v17", "v2"]  # string order, not numeric
    assert "100" in el.ids and "v2" in el.ids  # only ever destinations
    assert edges_of(el) == [("10", "9", 1.0), ("9", "2", 1.0), ("2", "100", 1.0), ("v17", "v2", 1.0)]


def test_ids_are_strings_not_numbers():
    el = parse_edges("1 01\n1.0 1\n", URL)
    assert el.ids == ["01", "1", "1.0"]  # three distinct vertices
    assert all(isinstance(v, str) for v in el.ids)


def test_self_loops_and_parallel_edges_are_kept():
    el = parse_edges("a a\na b\na b 2\n", URL)
    assert edges_of(el) == [("a", "a", 1.0), ("a", "b", 1.0), ("a", "b", 2.0)]


def test_empty_and_comment_only_text():
    for text in ("", "\n\n", "# only a comment\n   \n"):
        el = parse_edges(text, URL)
        assert el.ids == [] and el.n == 0
        assert el.src.shape == el.dst.shape == el.weight.shape == el.lineno.shape == (0,)


@pytest.mark.parametrize("weight", ["abc", "1.2.3", "1,5", "0x10", "--1", "1e"])
def test_bad_weight(weight):
    with pytest.raises(UsageError) as info:
        parse_edges(f"# c\na b 1\nb c {weight}\n", URL)
    msg = str(info.value)
    assert f"{URL}:3" in msg
    assert weight in msg
    assert "\n" not in msg


@pytest.mark.parametrize("weight", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400"])
def test_non_finite_weight(weight):
    with pytest.raises(UsageError) as info:
        parse_edges(f"a b\n\nb c {weight}\n", URL)
    msg = str(info.value)
    assert f"{URL}:3" in msg
    assert "finite" in msg


def test_too_many_fields():
    with pytest.raises(UsageError) as info:
        parse_edges("a b\nb c 1 2\n", URL)
    msg = str(info.value)
    assert f"{URL}:2" in msg
    assert "4 fields" in msg


def test_too_many_fields_ignores_comment():
    with pytest.raises(UsageError) as info:
        parse_edges("a b c d e # a b\n", URL)
    assert f"{URL}:1" in str(info.value) and "5 fields" in str(info.value)


def test_one_field():
    with pytest.raises(UsageError) as info:
        parse_edges("a b\n\n\nlonely   # x y\n", URL)
    msg = str(info.value)
    assert f"{URL}:4" in msg
    assert "one field" in msg
    assert "lonely" in msg


def test_first_bad_line_is_reported():
    with pytest.raises(UsageError) as info:
        parse_edges("a\nb c d e\n", URL)
    assert f"{URL}:1:" in str(info.value)


def test_random_round_trip():
    rnd = random.Random(1234)
    ids = [f"v{i}" for i in range(30)] + [str(i) for i in range(30)]
    expected = []
    lines = []
    for _ in range(300):
        s, d = rnd.choice(ids), rnd.choice(ids)
        if rnd.random() < 0.5:
            w = round(rnd.uniform(0, 10), 3)
            sep = rnd.choice([" ", "\t", "  "])
            lines.append(f"{s}{sep}{d} {w!r}")
            expected.append((s, d, w))
        else:
            lines.append(f"{s}\t{d}")
            expected.append((s, d, 1.0))
        if rnd.random() < 0.1:
            lines.append(rnd.choice(["", "# comment", "   "]))
    el = parse_edges("\n".join(lines) + "\n", URL)
    assert edges_of(el) == expected
    assert el.ids == sorted({v for e in expected for v in e[:2]})


def test_where_and_undirected():
    el = parse_edges("# c\na b 2\nb b 3\nc a\n", URL)
    assert el.where(0) == f"{URL}:2"
    assert el.where(2) == f"{URL}:4"
    u = el.undirected()
    got = sorted(edges_of(u))
    # every edge both ways, the self-loop once
    assert got == sorted([("a", "b", 2.0), ("b", "a", 2.0), ("b", "b", 3.0), ("c", "a", 1.0), ("a", "c", 1.0)])
    assert u.ids == el.ids


def test_adjacency_in_file_order():
    el = parse_edges("b a 2\na c\na b 3\na c 4\n", URL)
    adj = el.adjacency()
    assert adj[el.ids.index("a")] == [("c", 1.0), ("b", 3.0), ("c", 4.0)]
    assert adj[el.ids.index("b")] == [("a", 2.0)]
    assert adj[el.ids.index("c")] == []


# ----------------------------------------------------------------------------------------------
# load_edges
# ----------------------------------------------------------------------------------------------
def test_load_edges_from_memory_url():
    url = unique_memory_url()
    fs = fsspec.filesystem("memory")
    fs.pipe(url, b"# g\n1 2 0.5\n2 10\n")
    try:
        el = load_edges(url)
        assert el.url == url
        assert el.ids == ["1", "10", "2"]
        assert edges_of(el) == [("1", "2", 0.5), ("2", "10", 1.0)]
    finally:
        fs.rm(url)


def test_load_edges_error_names_memory_url_and_line():
    url = unique_memory_url()
    fs = fsspec.filesystem("memory")
    fs.pipe(url, b"a b\na b c\n")
    try:
        with pytest.raises(UsageError) as info:
            load_edges(url)
        assert f"{url}:2" in str(info.value)
    finally:
        fs.rm(url)


def test_load_edges_local_path(tmp_path):
    p = tmp_path / "g.e"
    p.write_text("x y 3\n")
    el = load_edges(str(p))
    assert edges_of(el) == [("x", "y", 3.0)]


def test_load_edges_missing_file(tmp_path):
    for url in (str(tmp_path / "nope.e"), unique_memory_url("missing.e")):
        with pytest.raises(UsageError) as info:
            load_edges(url)
        assert url in str(info.value)


def test_load_edges_directory_non_utf8_and_unknown_protocol(tmp_path):
    with pytest.raises(UsageError):
        load_edges(str(tmp_path))
    bad = tmp_path / "bad.e"
    bad.write_bytes(b"\xff\xfe a b\n")
    with pytest.raises(UsageError):
        load_edges(str(bad))
    with pytest.raises(UsageError):
        load_edges("nosuchprotocol-xyz://g.e")


def test_load_edges_default_is_the_shipped_example():
    el = load_edges(None)
    assert el.url == example_graph_url()
    assert el.n > 0
    assert el.ids == sorted(el.ids)
    assert "amsterdam" in el.ids  # sssp's default source


# ----------------------------------------------------------------------------------------------
# the numeric fast path gives exactly what the line parser gives


def _same(a: EdgeList, b: EdgeList) -> bool:
    return a.ids == b.ids and all(np.array_equal(getattr(a, k), getattr(b, k)) and getattr(a, k).dtype == getattr(b, k).dtype
                                  for k in ("src", "dst", "weight", "lineno"))


def _random_file(rng: random.Random, weighted: bool, n: int = 300, m: int = 2000) -> str:
    lines = []
    for _ in range(m):
        if rng.random() < 0.03:
            lines.append(rng.choice(["", "   ", "# a comment", "\t"]))
            continue
        a, b = rng.randrange(-5, n), rng.randrange(-5, n)
        sep = rng.choice([" ", "\t", "  ", " \t "])
        line = f"{a}{sep}{b}"
        if weighted:
            line += f" {rng.choice([rng.uniform(-10, 10), float(rng.randrange(100)), 1e-300, 2.5e17])!r}"
        if rng.random() < 0.05:
            line += "  # trailing comment"
        lines.append(line)
    return rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("block", [None, 64, 700])
def test_the_numeric_fast_path_equals_the_line_parser(seed, weighted, block, monkeypatch):
    """... also when it reads the text in many blocks (``PARSE_BLOCK`` bytes of whole lines each;
    64: a block of a line or two, of only blank or comment lines, or of lines with no line break)."""
    if block is not None:
        monkeypatch.setattr(edgelist, "PARSE_BLOCK", block)
    text = _random_file(random.Random(seed), weighted)
    fast = _parse_numeric(text, URL)
    assert fast is not None  # integer ids, same field count on every line: the fast path takes it
    assert _same(fast, _parse_lines(text, URL))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fields", [2, 3])
def test_plain_lines_take_the_quick_line_check_and_bytes_parse_as_text(seed, fields):
    """Every line with the same fields, no blank line or comment (the check that skips the line
    search): the line parser's result, from str or from bytes, with or without a last newline."""
    rng = random.Random(seed)
    lines = [" ".join([str(rng.randrange(-5, 400)), str(rng.randrange(400))] + [repr(rng.uniform(0, 9))] * (fields - 2))
             for _ in range(rng.randrange(1, 600))]
    text = rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])
    fast = _parse_numeric(text, URL)
    assert fast is not None and _same(fast, _parse_lines(text, URL))
    from_text, from_bytes = numeric_edges(text), numeric_edges(text.encode())
    assert from_text is not None and from_bytes is not None
    assert all(np.array_equal(a, b) for a, b in zip(from_text, from_bytes))
    assert (from_text[2] is None) == (fields == 2)  # no weights: none made
    assert numeric_edges(text.encode() + b"1 2 3 4\n") is None  # one line too long


@pytest.mark.parametrize("text", ["1 2\n" * 40 + "# c\n\n" * 30 + "3 4\n", "1 2\n" * 40 + "3 4 5\n" + "1 2\n" * 40,
                                  "\n" * 50 + "1 2", "1 2\n" * 40 + "3\n" + "1 2\n" * 40])
def test_blocks_of_lines_agree_on_the_fields_of_every_line(text, monkeypatch):
    """Read in blocks, a text takes the fast path as it does whole: a block of blank or comment
    lines only is no obstacle, a block whose lines have another field count than the others' is."""
    whole = numeric_edges(text)
    monkeypatch.setattr(edgelist, "PARSE_BLOCK", 16)
    blocks = numeric_edges(text)
    assert (whole is None) == (blocks is None)
    if whole is not None and blocks is not None:
        assert all(np.array_equal(a, b) for a, b in zip(whole, blocks))


@pytest.mark.parametrize("weighted", [False, True])
def test_blocks_whose_ids_fit_int32_and_blocks_whose_ids_do_not_parse_alike(weighted, monkeypatch):
    """Each block keeps its ids as int32 where they fit: blocks of small ids beside blocks of ids
    past 2^31 (and negative ones) give the ids and edges of the text read whole."""
    monkeypatch.setattr(edgelist, "PARSE_BLOCK", 40)
    rng = random.Random(3)
    big, small = [2 ** 31 + 5, 2 ** 40, -2 ** 31 - 1], [0, 7, -3, 2 ** 31 - 1]
    lines = [f"{rng.choice(big if i % 9 < 3 else small)} {rng.choice(small)}" + (" 0.5" if weighted else "")
             for i in range(120)]
    text = "\n".join(lines) + "\n"
    got = numeric_edges(text)
    assert got is not None
    ids, pairs = got[0], got[1]
    assert ids.dtype == np.int64
    assert [(int(ids[a]), int(ids[b])) for a, b in pairs] == [tuple(int(x) for x in ln.split()[:2]) for ln in lines]
    sparse = numeric_edges("0 2147483647\n5 9\n")  # int32 ids too far apart for a lookup table
    assert sparse is not None and sparse[0].dtype == np.int64 and sparse[0].tolist() == [0, 5, 9, 2147483647]


@pytest.mark.parametrize("text", [
    "007 1\n", "+1 2\n", "1.0 2 3\n", "1e3 2\n", "-0 1\n", "a b\n", "1 2\n3 4 5\n", "1 2\n3\n", "1 2 nan\n",
    "1 2 1_000\n", "99999999999999999999 1\n", "9223372036854775808 1\n", "9007199254740993 1 1e400\n",
    "1 2\r3 4\n", "1\x0b2\n", "1 2\x0c\n", "z\u00fcrich 1\n", "", "\n\n", "# only\n",
])
def test_anything_unusual_goes_to_the_line_parser(text):
    """Ids that are not canonical integers, uneven lines, bad or exotic input: the fast path
    declines, so results (and error messages naming the line) are the line parser's."""
    assert _parse_numeric(text, URL) is None


def test_weighted_lines_keep_ids_past_2_to_the_53():
    """Ids of a weighted file are read as integers, not through floats: 2^53 + 1 stays itself."""
    text = "9007199254740993 1 1.5\n1 9007199254740993 2e-3\n"
    fast = _parse_numeric(text, URL)
    assert fast is not None and _same(fast, _parse_lines(text, URL))


def _tokens_of(words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raw = " ".join(words).encode()
    first = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
    return np.frombuffer(raw, np.uint8), first, first + np.array([len(w) for w in words])


def _random_number(rng: random.Random) -> str:
    digits = "0123456789"
    kind = rng.random()
    if kind < 0.3:
        return repr(rng.random() * 10 ** rng.randint(-8, 8))
    if kind < 0.5:
        return "%.*g" % (rng.randint(1, 17), rng.uniform(-1e6, 1e6))
    if kind < 0.65:
        return "".join(rng.choice(digits) for _ in range(rng.randint(1, 19)))
    if kind < 0.85:
        parts = [rng.choice(["", "-", "+"]), "".join(rng.choice(digits) for _ in range(rng.randint(0, 8))),
                 rng.choice(["", "."]), "".join(rng.choice(digits) for _ in range(rng.randint(0, 8))),
                 rng.choice(["", "e", "E-", "e+"]), "".join(rng.choice(digits) for _ in range(rng.randint(0, 3)))]
        return "".join(parts) or "0"
    return "".join(rng.choice("0123456789.eE+-_x") for _ in range(rng.randint(1, 6)))


@pytest.mark.parametrize("seed", range(3))
def test_plain_decimals_are_float_to_the_bit_or_declined(seed):
    """Every token ``plain_decimals`` takes reads as ``float()`` reads it, to the bit (random
    reprs, %g forms, long digit strings, signs and exponents, junk); what it declines is either
    not a number for ``float()`` or outside its exact range; a batch with one such token: None."""
    rng = random.Random(seed)
    words = ["0", "-0.0", "+1.5", ".5", "5.", "1e5", "1E+05", "6.5e-05", "1e22", "1e-22", "9007199254740991"]
    words += [_random_number(rng) for _ in range(2000)]
    taken = 0
    for w in words:
        got = plain_decimals(*_tokens_of([w]))
        try:
            want: float | None = float(w)
        except ValueError:
            want = None
        if got is not None:
            assert want is not None and np.float64(want).tobytes() == got[0].tobytes(), w
            taken += 1
    assert taken > 1000
    for w in ["inf", "nan", "1_0", "0x10", "1e400", "1e23", "9007199254740993", ".", "e5", "1e", "1.2.3", "--1",
              "1e+-5", "-", "+", "1.5e", "5+"]:
        assert plain_decimals(*_tokens_of(["1.5", w, "2"])) is None, w
    batch = [w for w in words if plain_decimals(*_tokens_of([w])) is not None]
    got = plain_decimals(*_tokens_of(batch))
    assert got is not None and got.tolist() == [float(w) for w in batch]


def test_canonical_ints_take_only_canonical_decimals():
    words = ["0", "7", "10", "123456789012345678"]
    got = canonical_ints(*_tokens_of(words))
    assert got is not None and got.tolist() == [int(w) for w in words]
    for bad in ["007", "-1", "+1", "1.0", "1e3", "1234567890123456789", "1a"]:
        assert canonical_ints(*_tokens_of(["5", bad])) is None, bad


@pytest.mark.parametrize("seed", range(4))
def test_the_vertex_file_fast_path_reads_what_the_lines_say(seed):
    """One integer id a line, with blank lines, comments, tabs and CRLF: every id in file order,
    as ``int(line.split('#')[0])`` reads it; several fields or a non-canonical id: declined."""
    rng = random.Random(seed)
    lines, want = [], []
    for _ in range(rng.randrange(1, 800)):
        if rng.random() < 0.05:
            lines.append(rng.choice(["", "  ", "# a comment", "\t"]))
            continue
        v = rng.randrange(-50, 10 ** rng.randrange(1, 19))
        want.append(v)
        lines.append(rng.choice(["", " ", "\t"]) + str(v) + rng.choice(["", " ", "  # note"]))
    text = rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])
    got = numeric_ids(text.encode())
    assert got is not None and got.tolist() == want
    for bad in ("1 2\n", "007\n", "+1\n", "1.0\n", "-0\n", "x\n", "9223372036854775808\n", "1\r2\n", "\u00fc\n"):
        assert numeric_ids((text + "\n" + bad).encode()) is None, bad
