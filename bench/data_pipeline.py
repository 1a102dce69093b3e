"""Streaming vs in-memory training data: samples/s and peak memory per process, and PyTorch's DataLoader.

    python bench/data_pipeline.py            # Fashion-MNIST, one epoch per run (a few minutes)
    python bench/data_pipeline.py --quick    # 40 steps per run: a smoke run (~1-2 min)

Every run is a whole ``mariana run dnn-dp`` process (MLP 784-256-256-10, batch 128), its peak
resident memory per process read from /proc (VmHWM of the launcher and of every worker):

1. The same data, in memory (one ``.npz`` loaded whole, today's loader) vs streamed from the
   shards (``data=DIR``), on 1 replica (one process) and on 2 workers (2 replicas): samples/s of
   training (the supersteps' wall time, start-up excluded) and peak memory; ratio streamed /
   in-memory (target >= 0.95), and peak per process streamed on 2 workers (target <= 150 MB).
2. A data set 4x a per-process address-space cap (``RLIMIT_AS``, what ``prlimit --as`` sets):
   the same job, streamed, must complete under the cap; in memory it cannot.
3. Side by side: the same MLP in PyTorch, fed by ``torch.utils.data.DataLoader`` over the same
   shards (a map-style data set reading the .npz members; batch 128, 1 thread, no worker
   processes), time per epoch and peak memory.

Figures go to stdout as a table and, with ``--json``, as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

MODEL = '["dense:256:relu", "dense:256:relu", "dense:10"]'
BATCH = 128


def peak_rss_tree(proc: subprocess.Popen, interval: float = 0.05) -> dict[int, int]:
    """Poll /proc while ``proc`` runs: VmHWM (peak resident set, kB) of it and every descendant."""
    peaks: dict[int, int] = {}

    def children(pid: int) -> list[int]:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except OSError:
            return []
        return kids + [g for k in kids for g in children(k)]

    while proc.poll() is None:
        for pid in [proc.pid, *children(proc.pid)]:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]))
            except OSError:
                pass
        time.sleep(interval)
    return peaks


def run_mariana(tag: str, data: str, workers: int, steps: int, extra: list[str], run_dir: Path,
                cap_mb: int = 0, test_fraction: float = 0.0) -> dict[str, Any]:
    """One ``mariana run dnn-dp`` process: samples/s of its supersteps and peak RSS per process."""
    argv = [sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", str(workers), "--run-dir", str(run_dir),
            "--no-trace", "--set", f"data={data}", "--set", f"model={MODEL}", "--set", f"batch_size={BATCH}",
            "--set", f"steps={steps}", "--set", "epochs=1", "--set", f"test_fraction={test_fraction}", "--json", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")

    def limit() -> None:
        if cap_mb:
            resource.setrlimit(resource.RLIMIT_AS, (cap_mb << 20, cap_mb << 20))

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
    peaks = peak_rss_tree(proc)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    res: dict[str, Any] = {"tag": tag, "workers": workers, "rc": proc.returncode, "wall_s": round(wall, 2),
                           "peak_mb": round(max(peaks.values(), default=0) / 1024, 1),
                           "peaks_mb": sorted(round(v / 1024, 1) for v in peaks.values())}
    if proc.returncode:
        res["error"] = err.decode().strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
        return res
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_s = sum(m.get("wall_s", 0.0) for m in metrics if "test_accuracy" not in m)
    res.update(train_s=round(train_s, 2), samples_per_s=round(steps * BATCH / train_s, 1),
               test_accuracy=json.loads(out.decode().strip().splitlines()[-1]).get("test_accuracy"))
    return res


def torch_child(spec: dict[str, Any]) -> None:
    """PyTorch's DataLoader over the shards: time per epoch and peak RSS (run in its own process)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    from mariana.vertices.train.shards import open_shards

    torch.set_num_threads(1)
    split = open_shards(spec["data"], verify=False).train

    class Shards(Dataset):
        """Map-style: sample i read from its shard's byte range (a batch reads its rows one by one)."""

        def __init__(self) -> None:
            self.starts = np.cumsum([0] + [hi - lo for _, lo, hi in split.segments])

        def __len__(self) -> int:
            return int(self.starts[-1])

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            j = int(np.searchsorted(self.starts, i, side="right") - 1)
            shard, lo, _ = split.segments[j]
            x, y = split.read_rows(shard, lo + i - int(self.starts[j]), lo + i - int(self.starts[j]) + 1)
            return torch.from_numpy(x.reshape(-1).astype(np.float32) / np.float32(255)), int(y[0])

    loader = DataLoader(Shards(), batch_size=BATCH, shuffle=True, drop_last=True, num_workers=0,
                        generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    t0 = time.perf_counter()
    steps = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if steps >= spec["steps"]:
            break
    dt = time.perf_counter() - t0
    print(json.dumps({"steps": steps, "train_s": round(dt, 2), "samples_per_s": round(steps * BATCH / dt, 1),
                      "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


def big_shards(to: Path, src: str, target_mb: int) -> int:
    """A synthetic data set of about ``target_mb`` MB: Fashion-MNIST's train images tiled, written
    shard by shard (never held whole), plus its test split."""
    from mariana.vertices.train.shards import ShardWriter, open_shards

    ss = open_shards(src, verify=False)
    chunks = [ss.train.read_rows(i, lo, hi) for i, lo, hi in ss.train.segments]
    w = ShardWriter(str(to), shard_mb=64.0, source=f"{src} tiled")
    written = 0
    while written < target_mb << 20:
        for x, y in chunks:
            w.add("train", x, y)
            written += x.nbytes
    for i, lo, hi in ss.test.segments if ss.test else ():
        w.add("test", *ss.test.read_rows(i, lo, hi))
    w.close(10)
    return written >> 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", "--smoke", action="store_true", help="40 steps per run: a smoke run")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default: one epoch; --quick 40)")
    ap.add_argument("--cap-mb", type=int, default=0, help="RLIMIT_AS of the capped run (default 256 MB; the data set "
                    "is 4x it)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each in-memory/streamed pair (best kept; --quick 1)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        torch_child(json.loads(args.child))
        return
    from mariana.vertices.train.named import named_shards
    from mariana.vertices.train.shards import open_shards

    shards = named_shards("fashion-mnist")  # the Debian package's files (or MARIANA_DATA), sharded once
    steps = args.steps or (40 if args.quick else 60000 // BATCH)
    if args.quick:
        args.rounds = 1
    out: dict[str, Any] = {"steps": steps, "batch": BATCH, "load": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        # the same data as one .npz (train then test; test_fraction 1/7 holds out 10000 samples)
        ss = open_shards(shards, verify=False)
        parts = [ss.train.read_rows(i, lo, hi) for i, lo, hi in ss.train.segments]
        parts += [ss.test.read_rows(i, lo, hi) for i, lo, hi in ss.test.segments] if ss.test else []
        np.savez(tmp / "fashion.npz", x=np.concatenate([p[0] for p in parts]), y=np.concatenate([p[1] for p in parts]))
        del parts
        rows = []
        for workers in (1, 2):
            tries: dict[str, list[dict[str, Any]]] = {"in-memory": [], "streamed": []}
            for rnd in range(args.rounds):  # alternating; the best round of each (a shared machine's noise)
                for kind, data, tf in (("in-memory", str(tmp / "fashion.npz"), 10000 / 70000), ("streamed", shards, 0.0)):
                    tries[kind].append(run_mariana(f"{kind} w={workers}", data, workers, steps, [],
                                                   tmp / f"{kind}{workers}-{rnd}", test_fraction=tf))
            best = {k: max(v, key=lambda r: r.get("samples_per_s", 0)) for k, v in tries.items()}
            for k, v in tries.items():
                best[k]["rounds_samples_per_s"] = [r.get("samples_per_s") for r in v]
            mem, st = best["in-memory"], best["streamed"]
            rows += [mem, st]
            if "samples_per_s" in mem and "samples_per_s" in st:
                out[f"ratio_w{workers}"] = round(st["samples_per_s"] / mem["samples_per_s"], 3)
        out["runs"] = rows
        # 2. a data set 4x a per-process cap
        cap = args.cap_mb or 256
        target = 4 * cap
        big = tmp / "big"
        made = big_shards(big, shards, target)
        capped = run_mariana(f"streamed {made} MB, cap {cap} MB", str(big), 1, min(steps, 200), ["--set", "verify_data=false"],
                             tmp / "capped", cap_mb=cap)
        out["capped"] = {"data_mb": made, "cap_mb": cap, **capped}
        # 3. PyTorch's DataLoader over the same shards
        if not args.no_torch:
            p = subprocess.run([sys.executable, __file__, "--child", json.dumps({"data": shards, "steps": steps})],
                               stdout=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
            out["torch"] = json.loads(p.stdout.decode().strip().splitlines()[-1]) if p.returncode == 0 else {"rc": p.returncode}
    print(f"{'run (best of ' + str(args.rounds) + ')':<34}{'samples/s':>10}{'train s':>9}{'peak MB/proc':>14}  accuracy")
    for r in out["runs"] + [out["capped"]]:
        print(f"{r['tag']:<34}{r.get('samples_per_s', '-'):>10}{r.get('train_s', '-'):>9}{r['peak_mb']:>14}  "
              f"{r.get('test_accuracy', r.get('error', ''))}")
    if "torch" in out and "samples_per_s" in out["torch"]:
        t = out["torch"]
        print(f"{'torch DataLoader (1 thread)':<34}{t['samples_per_s']:>10}{t['train_s']:>9}{t['peak_mb']:>14}")
    for w in (1, 2):
        if f"ratio_w{w}" in out:
            print(f"streamed / in-memory samples/s, {w} worker(s): {out[f'ratio_w{w}']} (target >= 0.95)")
    print(f"peak per process, streamed, 2 workers: {max(out['runs'][3]['peaks_mb'], default=0)} MB (target <= 150)")
    print(f"{out['capped']['data_mb']} MB data set under a {out['capped']['cap_mb']} MB address-space cap: "
          f"{'completed' if out['capped']['rc'] == 0 else 'FAILED: ' + out['capped'].get('error', '')}")
    print(f"load average at start: {out['load'][0]:.1f}")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
