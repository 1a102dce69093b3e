"""`--tensorboard DIR`: the event files hold the run's metrics as scalars, step = superstep.

The files are read back with the TFRecord framing and tensorboardX's own Event protobuf (what
TensorBoard reads), independently of the writer."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from report_helpers import losses, metrics, run_cli

pytest.importorskip("tensorboardX", reason="tensorboardX is the optional extra mariana-bsp[report]")
from tensorboardX.proto import event_pb2  # noqa: E402


def read_events(logdir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """{tag: [(step, value), ...]} of every scalar, {tag: text} of every text summary."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    texts: dict[str, str] = {}
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert files, f"no event file in {logdir}"
    for f in files:
        data = f.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            pos += 12  # length + its crc
            event = event_pb2.Event.FromString(data[pos:pos + length])
            pos += length + 4  # data + its crc
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    scalars.setdefault(v.tag, []).append((event.step, v.simple_value))
                elif v.HasField("tensor") and v.tensor.string_val:
                    texts[v.tag.split("/")[0]] = v.tensor.string_val[0].decode()
    return scalars, texts


def test_tensorboard_scalars_are_the_runs_metrics(tmp_path: Path):
    run, tb = tmp_path / "run", tmp_path / "tb"
    assert run_cli("run", "dnn-dp", "--run-dir", str(run), "--set", "epochs=2", "--tensorboard", str(tb)) == 0
    scalars, texts = read_events(tb)
    xs, ys = losses(run)
    assert [s for s, _ in scalars["loss"]] == xs
    assert [v for _, v in scalars["loss"]] == [float(np.float32(y)) for y in ys]  # TensorBoard stores float32
    lines = metrics(run)
    acc = [(m["superstep"], float(np.float32(m["test_accuracy"]))) for m in lines if "test_accuracy" in m]
    assert scalars["test_accuracy"] == acc and len(acc) == 2
    assert [s for s, _ in scalars["engine/wall_s"]] == [m["superstep"] for m in lines]
    assert [v for _, v in scalars["engine/messages"]] == [m["messages"] for m in lines]
    assert [s for s, _ in scalars["throughput/samples_per_s"]] == xs
    assert all(v > 0 for _, v in scalars["throughput/samples_per_s"])
    assert '"epochs": 2' in texts["config"] and texts["job"] == "dnn-dp"
    assert not any(tag in scalars for tag in ("superstep", "workers", "engine/superstep"))


def test_tensorboard_on_a_cluster_run_with_the_live_page(tmp_path: Path):
    run, tb = tmp_path / "run", tmp_path / "tb"
    assert run_cli("run", "pagerank", "--workers", "2", "--run-dir", str(run), "--tensorboard", str(tb),
                   "--ui") == 0
    scalars, _ = read_events(tb)
    lines = metrics(run)
    assert [v for _, v in scalars["engine/active"]] == [m["active"] for m in lines]
    assert [s for s, _ in scalars["engine/bytes"]] == [m["superstep"] for m in lines if "bytes" in m]
    assert json.loads((run / "job.json").read_text())["status"] == "finished"


def test_tensorboard_dir_that_cannot_be_written_is_exit_2(tmp_path: Path, capsys):
    (tmp_path / "file").write_text("x")
    assert run_cli("run", "wcc", "--run-dir", str(tmp_path / "r"), "--tensorboard", str(tmp_path / "file" / "tb")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mariana: error: --tensorboard") and "cannot write there" in err[0]
    assert not (tmp_path / "r" / "job.json").exists()  # refused before the job started
