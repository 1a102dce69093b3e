"""CURVE security: keys, refusals (unknown key, plaintext, wrong server key), identical results
with and without --secure, and fuzzing of a secure master and worker by an insider key."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from mariana.comm.security import Security, add_key, init_keys, load_keypair
from mariana.cli import main
from mariana.jobs.launch import run_job
from test_cluster import GRAPH, _fuzz_messages

pytestmark = pytest.mark.timeout(180)

OK, AUTH_FAILED = zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_AUTH


def test_keys_init_and_add_make_private_secret_files(tmp_path, capsys):
    keys = tmp_path / "keys"
    assert main(["keys", "init", str(keys)]) == 0
    assert main(["keys", "add", str(keys), "w0"]) == 0
    for f in ("master.key_secret", "w0.key_secret"):
        assert stat.S_IMODE((keys / f).stat().st_mode) == 0o600
    assert (keys / "allowed" / "w0.key").exists() and not (keys / "w0.key").exists()
    assert main(["keys", "init", str(keys)]) == 2  # never overwrites a master key


def test_a_secret_key_readable_by_others_is_refused(tmp_path, capsys):
    keys = tmp_path / "keys"
    main(["keys", "init", str(keys)])
    main(["keys", "add", str(keys), "w0"])
    os.chmod(keys / "w0.key_secret", 0o644)
    code = main(["worker", "--master", "tcp://127.0.0.1:9", "--server-key", str(keys / "master.key"),
                 "--key", str(keys / "w0.key_secret")])
    err = capsys.readouterr().err
    assert code == 2 and "readable by others (mode 0644)" in err and "chmod 600" in err


@pytest.mark.parametrize("where, mode", [("", 0o777), ("allowed", 0o777), ("allowed", 0o775),
                                         ("allowed/w0.key", 0o666), ("allowed/w0.key", 0o664)])
def test_a_key_directory_or_allow_list_writable_by_others_is_refused(tmp_path, capsys, where, mode):
    """As ssh refuses a group- or world-writable ~/.ssh: anyone who can write there can plant a key."""
    keys = tmp_path / "keys"
    main(["keys", "init", str(keys)])
    main(["keys", "add", str(keys), "w0"])
    path = keys / where if where else keys
    os.chmod(path, mode)
    code = main(["master", "wcc", "--keys", str(keys), "--bind", "tcp://127.0.0.1:0", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    line = [x for x in err.splitlines() if "writable by others" in x]
    assert len(line) == 1 and f"{path} is writable by others (mode {mode:04o})" in line[0]
    assert f"chmod go-w {path}" in line[0]


def test_keys_add_refuses_a_world_writable_allow_list(tmp_path, capsys):
    keys = tmp_path / "keys"
    main(["keys", "init", str(keys)])
    os.chmod(keys / "allowed", 0o777)
    assert main(["keys", "add", str(keys), "w0"]) == 2
    assert f"chmod go-w {keys / 'allowed'}" in capsys.readouterr().err
    assert not (keys / "w0.key_secret").exists()


def test_keys_made_under_a_group_writable_umask_are_accepted(tmp_path):
    old = os.umask(0o002)
    try:
        secret = init_keys(str(tmp_path / "keys"))
        add_key(str(tmp_path / "keys"), "w0")
    finally:
        os.umask(old)
    security = Security.for_master(str(secret.parent))
    assert len(security.allowed.keys) == 1


def test_an_off_loopback_master_without_keys_is_refused(capsys):
    assert main(["master", "wcc", "--bind", "tcp://0.0.0.0:0", "--workers", "1"]) == 2
    assert "needs CURVE keys" in capsys.readouterr().err


def _attempt(ctx, endpoint, server_key, client=None, plaintext=False, timeout_ms=3000) -> int:
    """One connection attempt; returns the handshake event (OK, a failure, or 0 on timeout)."""
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    s.setsockopt(zmq.RECONNECT_IVL, -1)
    if not plaintext:
        public, secret = client or zmq.curve_keypair()
        s.curve_publickey, s.curve_secretkey, s.curve_serverkey = public, secret, server_key
    mon = s.get_monitor_socket()
    try:
        s.connect(endpoint)
        try:
            s.send_multipart([b"hello?"], zmq.NOBLOCK)
        except zmq.Again:  # the server already dropped the connection (a refused handshake): no pipe left
            pass
        while mon.poll(timeout_ms):
            event = recv_monitor_message(mon)["event"]
            if event == OK or event & (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                       | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_DISCONNECTED):
                return event
        return 0
    finally:
        s.disable_monitor()
        mon.close(linger=0)
        s.close(linger=0)


def test_strangers_cannot_join_send_or_read(tmp_path):
    results = {}

    def attack(line):
        if line["superstep"] != 2:
            return
        master = results["master"]
        worker = master.by_index[0]
        with zmq.Context() as ctx:
            events = [_attempt(ctx, master.endpoint, master.security.public) for _ in range(500)]
            events += [_attempt(ctx, worker.data, worker.key.encode()) for _ in range(500)]
            results["unknown"] = events
            results["plaintext"] = _attempt(ctx, master.endpoint, None, plaintext=True)
            allowed = load_keypair(results["key"])  # a real worker key, but the wrong server key
            results["wrong_server"] = _attempt(ctx, master.endpoint, zmq.curve_keypair()[0], client=allowed)
            results["control"] = _attempt(ctx, master.endpoint, master.security.public, client=allowed)
        results["joined"] = len(master.joined)

    def on_start(master, procs):
        results["master"] = master
        results["key"] = procs[0].args[procs[0].args.index("--key") + 1]

    res = run_job("contract_jobs:forever", sets=["max_supersteps=6"], workers=2, runtime="cluster", secure=True,
                  on_superstep=attack, on_start=on_start)
    assert res.supersteps == 6 and results["joined"] == 2
    events = results["unknown"]
    assert len(events) == 1000 and events.count(OK) == 0  # 0 of 1,000 accepted
    assert events.count(AUTH_FAILED) >= 990  # refused by the authenticator, not merely timed out
    assert results["plaintext"] != OK and results["wrong_server"] != OK
    assert results["control"] == OK  # the probe itself can succeed: an allowed key gets in


@pytest.mark.parametrize("job,extra", [("pagerank", []), ("sssp", ["--set", "source=n1"]), ("wcc", []),
                                       ("dnn-dp", ["--set", "epochs=2"])])
def test_results_are_identical_with_and_without_secure(tmp_path, job, extra):
    outputs = []
    for flag in ([], ["--secure"]):
        run = tmp_path / f"run{len(outputs)}"
        args = ["run", job, "--workers", "2", "--run-dir", str(run), *extra, *flag]
        if job != "dnn-dp":
            args += ["--set", f"graph={GRAPH}", "--set", f"output={run}.tsv"]
        assert main(args) == 0
        if job == "dnn-dp":
            outputs.append({f.name: f.read_bytes() for f in sorted((run / "params").glob("*.npy"))})
        else:
            outputs.append(Path(f"{run}.tsv").read_bytes())
    assert outputs[0] == outputs[1]


def test_fuzzing_a_secure_master_and_worker_from_an_insider_key():
    """10,000 seeded malformed messages from a holder of a valid key: counted, harmless."""
    rng = random.Random(7)
    to_master, to_worker = _fuzz_messages(rng, 5000), _fuzz_messages(rng, 5000)
    state = {}

    def fuzz(line):
        if line["superstep"] != 3:
            return
        master = state["master"]
        target = master.by_index[0]
        # the other worker's own key: allowed by the master and by worker 0 (workers join in any order)
        insider = load_keypair(next(key for pid, key in state["keys"] if pid != target.pid))
        with zmq.Context() as ctx:
            socks = []
            for endpoint, server_key, messages in [(master.endpoint, master.security.public, to_master),
                                                   (target.data, target.key.encode(), to_worker)]:
                s = ctx.socket(zmq.DEALER)
                s.linger = 5000
                s.sndtimeo = 20_000  # a refused connection fails the test instead of hanging it
                s.curve_publickey, s.curve_secretkey, s.curve_serverkey = insider[0], insider[1], server_key
                s.connect(endpoint)
                for frames in messages:
                    s.send_multipart(frames)
                socks.append(s)
            for s in socks:
                s.close()

    def on_start(master, procs):
        state["master"] = master
        state["keys"] = [(p.pid, p.args[p.args.index("--key") + 1]) for p in procs]

    sets = [f"graph={GRAPH}", "iterations=150", "tol=0", "mode=vertex"]
    reference = run_job("pagerank", sets=sets, workers=2, runtime="local")
    res = run_job("pagerank", sets=sets, workers=2, runtime="cluster", secure=True, on_superstep=fuzz,
                  on_start=on_start)
    assert res.values == reference.values
    dropped = state["master"].dropped
    assert sum(dropped.values()) == 10_000, dropped
    assert dropped.get("banned", 0) > 0  # a peer past 1,000 malformed messages is ignored from then on


def test_a_master_key_that_starts_with_a_dash_reaches_the_workers(tmp_path, monkeypatch):
    """Z85 keys may start with "-": `run --secure` must pass such a key so that the worker's
    argument parser takes it as a value, not as an option (it failed about one run in 85)."""
    real = zmq.curve_keypair

    def dash_first():  # the keys made in this process (the master's) start with "-"
        while True:
            public, secret = real()
            if public.startswith(b"-"):
                return public, secret

    monkeypatch.setattr(zmq, "curve_keypair", dash_first)
    out = tmp_path / "labels.tsv"
    assert main(["run", "wcc", "--workers", "2", "--secure", "--run-dir", str(tmp_path / "run"),
                 "--set", f"graph={GRAPH}", "--set", f"output={out}"]) == 0
    assert len(out.read_text().splitlines()) == 59  # every vertex of the small graph labelled
