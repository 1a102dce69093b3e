"""RunDir.list: the names in a folder of a run directory, on a local path and on memory://; an
upload an object store cut short is caught by its size."""

from __future__ import annotations

import uuid

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from mariana.errors import StorageError
from mariana.storage import RunDir

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_list_names_a_folders_entries_sorted_and_a_missing_folder_as_empty(tmp_path, kind):
    url = str(tmp_path / "run") if kind == "file" else f"memory://rundir-{uuid.uuid4().hex}"
    rd = RunDir(url)
    assert rd.list("trace") == []
    rd.append_jsonl("trace/worker-1.jsonl", [{"superstep": 0}])
    rd.append_jsonl("trace/master.jsonl", [{"superstep": 0}])
    rd.write_bytes("trace/sub/x.bin", b"x")
    assert rd.list("trace") == ["master.jsonl", "sub", "worker-1.jsonl"]
    rd.append_jsonl("trace/worker-0.jsonl", [{"superstep": 0}])  # seen at once: no stale listing
    assert rd.list("trace") == ["master.jsonl", "sub", "worker-0.jsonl", "worker-1.jsonl"]


class _CutShort(MemoryFileSystem):
    """An object store that keeps all but the last byte of the next ``cuts`` uploads (a faulty
    proxy or store: the kind of fault only a size check after the upload can see)."""

    protocol = "cutshort"
    cuts = 0

    def _open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
        f = super()._open(path, mode, **kwargs)
        if "w" in mode and type(self).cuts > 0:  # a memory file is stored as it is written
            type(self).cuts -= 1

            def cut_close() -> None:
                f.truncate(max(f.getbuffer().nbytes - 1, 0))

            f.close = cut_close
        return f


@pytest.fixture
def cutshort():
    fsspec.register_implementation("cutshort", _CutShort, clobber=True)
    yield _CutShort
    _CutShort.cuts = 0
    _CutShort.store.clear()


def test_an_upload_cut_short_is_retried_then_stored_whole(cutshort, monkeypatch):
    monkeypatch.setenv("MARIANA_STORAGE_RETRY_S", "5")
    cutshort.cuts = 1
    rd = RunDir(f"cutshort://run-{uuid.uuid4().hex}")
    rd.write_bytes("params/w.bin", b"0123456789")
    assert cutshort.cuts == 0 and rd.read_bytes("params/w.bin") == b"0123456789"


def test_an_upload_always_cut_short_fails_naming_it(cutshort, monkeypatch):
    monkeypatch.setenv("MARIANA_STORAGE_RETRY_S", "0")
    cutshort.cuts = 10
    rd = RunDir(f"cutshort://run-{uuid.uuid4().hex}")
    with pytest.raises(StorageError, match="short upload: 9 of 10 bytes"):
        rd.write_bytes("params/w.bin", b"0123456789")


def test_write_lines_streams_pieces_and_leaves_nothing_when_a_piece_fails(tmp_path):
    """``write_lines``: the pieces in order make the file; a piece that raises leaves no file
    (not even a temp file) and the error reaches the caller."""
    from mariana.storage import write_lines

    out = tmp_path / "part-00000.tsv"
    write_lines(str(out), lambda: (f"{i}\t{i * i}\n" for i in range(1000)))
    assert out.read_text().splitlines()[-1] == "999\t998001"

    def broken():
        yield "0\t0\n"
        raise ValueError("formatting failed")

    other = tmp_path / "other.tsv"
    with pytest.raises(StorageError, match="formatting failed"):
        write_lines(str(other), broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-00000.tsv"]
