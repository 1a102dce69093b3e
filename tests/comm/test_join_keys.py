"""Joining a master with keys (issue 20, items 2 and 3): ``mariana master --keys DIR`` on loopback
speaks CURVE and writes DIR/master.json as the README says, and a worker whose key is not on the
allow-list exits 2 at once, saying so, instead of waiting forever."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mariana.cli import main

pytestmark = pytest.mark.timeout(90)

GRAPH = Path(__file__).parent.parent / "engine" / "data" / "small.e"


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.stat().st_size and path.read_text().endswith("}")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_loopback_master_with_keys_writes_master_json_and_refuses_unknown_keys(tmp_path, capsys):
    keys = tmp_path / "keys"
    assert main(["keys", "init", str(keys)]) == 0
    assert main(["keys", "add", str(keys), "host2"]) == 0
    assert main(["keys", "add", str(keys), "stranger"]) == 0
    (keys / "allowed" / "stranger.key").unlink()  # a key the master does not know
    capsys.readouterr()
    master = subprocess.Popen([sys.executable, "-m", "mariana", "master", "wcc", "--workers", "1", "--keys", str(keys),
                               "--set", f"graph={GRAPH}", "--run-dir", str(tmp_path / "run")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(keys / "master.json", master)
        worker = [sys.executable, "-m", "mariana", "worker", "--master-file", str(keys / "master.json"),
                  "--connect-timeout", "20", "--key"]
        t0 = time.monotonic()
        stranger = subprocess.run([*worker, str(keys / "stranger.key_secret")], capture_output=True, text=True, timeout=60)
        assert stranger.returncode == 2 and "allow-list" in stranger.stderr, stranger.stderr
        assert time.monotonic() - t0 < 15  # told at once, not after --connect-timeout
        friend = subprocess.run([*worker, str(keys / "host2.key_secret")], capture_output=True, text=True, timeout=60)
        assert friend.returncode == 0, friend.stderr
        out, err = master.communicate(timeout=60)
        assert master.returncode == 0, err
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()


def test_a_secure_worker_gives_up_after_connect_timeout_on_a_plaintext_master(tmp_path, capsys):
    keys = tmp_path / "keys"
    assert main(["keys", "init", str(keys)]) == 0
    assert main(["keys", "add", str(keys), "host2"]) == 0
    master = subprocess.Popen([sys.executable, "-m", "mariana", "master", "wcc", "--workers", "1",
                               "--set", f"graph={GRAPH}", "--run-dir", str(tmp_path / "run"),
                               "--master-file", str(tmp_path / "m.json")],  # written without keys too
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(tmp_path / "m.json", master)
        endpoint = json.loads((tmp_path / "m.json").read_text())["endpoint"]
        t0 = time.monotonic()
        w = subprocess.run([sys.executable, "-m", "mariana", "worker", "--master", endpoint, "--server-key",
                            str(keys / "master.key"), "--key", str(keys / "host2.key_secret"), "--connect-timeout", "3"],
                           capture_output=True, text=True, timeout=60)
        assert w.returncode == 2 and "handshake" in w.stderr, w.stderr
        assert time.monotonic() - t0 < 20
    finally:
        master.kill()
        master.wait()
