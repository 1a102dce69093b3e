"""``check_writable`` and the run directory's own check: a place that cannot be written is one
``NotWritable`` (a ``UsageError``: exit 2) naming it, and the probe leaves nothing behind (issue 52)."""

from __future__ import annotations

import os
import uuid

import fsspec
import pytest

from mariana.errors import StorageError, UsageError
from mariana.storage import RunDir
from mariana.storage.rundir import NotWritable, check_writable

pytestmark = pytest.mark.timeout(30)

#: a folder that exists and that even root cannot create files in (procfs)
UNWRITABLE = "/proc/self"


def test_not_writable_is_a_usage_error_and_a_storage_error():
    assert issubclass(NotWritable, UsageError) and issubclass(NotWritable, StorageError)
    assert NotWritable("x").exit_code == 2


def test_a_writable_folder_passes_and_keeps_nothing(tmp_path):
    check_writable(str(tmp_path), "run directory")
    check_writable(str(tmp_path / "out.tsv"), "config key 'output'", inside=False)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_probed_above_and_not_created(tmp_path):
    check_writable(str(tmp_path / "a" / "b" / "run"), "run directory")
    check_writable(str(tmp_path / "c" / "out.tsv"), "config key 'output'", inside=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url,inside,needles", [
    (UNWRITABLE, True, ["run directory /proc/self cannot be written"]),
    (f"{UNWRITABLE}/out.tsv", False, ["/proc/self/out.tsv cannot be written"]),
    ("/proc/mariana-no-such/deeper/run", True, ["cannot be written", "(/proc)"]),
])
def test_an_unwritable_place_is_refused(url, inside, needles):
    with pytest.raises(NotWritable) as info:
        check_writable(url, "run directory", inside=inside)
    text = str(info.value)
    assert "\n" not in text and ".probe." not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


def test_a_file_in_the_way_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(NotWritable, match="is not a directory"):
        check_writable(str(blocker / "run"), "run directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_remote_store_is_probed_where_the_data_goes():
    url = f"memory://mariana-check-writable/{uuid.uuid4().hex}/out"
    check_writable(url, "config key 'output'")
    fs = fsspec.filesystem("memory")
    assert not [p for p in fs.find("/mariana-check-writable") if ".probe." in p]


@pytest.mark.parametrize("url", [UNWRITABLE, "/proc/mariana-no-such/run", "/dev/null/run"])
def test_run_dir_that_cannot_be_made_or_written_is_not_writable(url):
    with pytest.raises(NotWritable) as info:
        RunDir(url)
    assert str(info.value).startswith(f"run directory {url} cannot be "), str(info.value)


def test_run_dir_still_made_where_it_can_be(tmp_path):
    run = RunDir(str(tmp_path / "x" / "run"))
    run.write_json("job.json", {"a": 1})
    assert os.listdir(tmp_path / "x" / "run") == ["job.json"]


@pytest.mark.timeout(120)
def test_s3_prefix_is_probed_and_a_refused_identity_is_not_writable(s3_url, s3_server, monkeypatch):
    import fsspec.config
    from s3_fixture import list_keys

    check_writable(f"{s3_url}/deep/prefix/out.tsv", "config key 'output'", inside=False)
    check_writable(f"{s3_url}/runs/one", "run directory")
    assert list_keys(s3_url) == []
    monkeypatch.setitem(fsspec.config.conf, "s3", {"key": s3_server.access_key, "secret": "not-the-secret",
                                                   "skip_instance_cache": True})
    with pytest.raises(NotWritable, match=f"config key 'output' {s3_url}/out.tsv cannot be written"):
        check_writable(f"{s3_url}/out.tsv", "config key 'output'", inside=False)
