"""RunDir.list: the names in a folder of a run directory, on a local path and on memory://."""

from __future__ import annotations

import uuid

import pytest

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
