#!/usr/bin/env python
"""dnn-dp across emulated hosts (bench/netcluster.py) on shaped links, with torch DDP as the peer (issue 47).

    python bench/cluster.py                          # 2, 4, 8 hosts x 1gbit, 200mbit; mariana and torch DDP
    python bench/cluster.py --hosts 16 --rates 1gbit --no-torch   # bytes per member at N = 16
    python bench/cluster.py --smoke                  # 2 hosts, 784-64x3-10, 3 steps, no torch: CI smoke run
    python bench/cluster.py --json

One cluster of max(--hosts) + 1 emulated hosts (network, UTS, mount namespaces on a bridge of
their own), every link shaped with tc tbf to each ``--rates`` in turn. mariana: ``mariana
master dnn-dp`` on host 0 (CURVE keys from ``mariana keys init/add``, as docs/across-hosts.md
says; ``--plaintext``: ``--insecure``) and one ``mariana worker`` on each of hosts 1..N; the MLP
784-2048x3-10 (``model``), global batch 256 (``batch_size``), synthetic data (``default_rng(0)``,
x float32 (n, 784), y in [0, 10), a temporary ``.npz`` every host reads: ``data=``), the job's
default exchange (auto). torch: DistributedDataParallel over gloo, one rank on each of hosts
1..N, the same MLP, batch (256 / N per rank), momentum SGD and data. Every process has one
BLAS/OpenMP thread (``OMP/OPENBLAS/MKL/BLIS_NUM_THREADS=1``; torch also ``set_num_threads(1)``).

Figures, over the steady state (the ``--warmup`` first steps left out):
- time per step: mariana, from the workers' traces (from the moment every worker has the first
  measured step's inbox to the same moment after the last step: ``mariana_figures``); torch,
  from rank 0's clock after each ``optimizer.step()`` (its allreduce done);
- busiest link per step: the most bytes that crossed one host's link in one direction (the
  bridge port's counters, sampled every 5 ms from inside the bridge's namespace and interpolated
  at the window's ends; ``link_sample_gap_s``: the widest sample gap there), per step; the link
  limit = those bytes / the rate; ``limit/time`` = link limit / time per step (issue target >= 0.8);
- bytes per member per step: what each worker's trace says it sent its peers (``bytes_out``,
  headers included; mean over members), against 2(N-1)/N x the model's bytes (reduce-scatter
  + all-gather); and the wire bytes its link carried (TCP/IP and CURVE included);
- samples/s = 256 / time per step; mariana / torch (issue target >= 1.0).
Both with the environment as it is and with ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE``
removed (when set). Needs root (network namespaces); without it, says why and exits 0.
Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import netcluster as nc  # noqa: E402
from common import BLAS_VARS, THREAD_VARS, variant_envs  # noqa: E402

BATCH = 256
IN, OUT = 784, 10
LR = 0.05
LIMIT_TARGET = 0.8
TORCH_TARGET = 1.0
#: a run that has not ended by then is a hang
RUN_TIMEOUT = 600.0

#: in the bridge's namespace: every ``period`` s one line "time rx0 tx0 rx1 tx1 ..." of its ports
SAMPLER = r"""
import os, sys, time
period, ports = float(sys.argv[1]), sys.argv[2:]
fds = [os.open(f"/sys/class/net/{p}/statistics/{d}_bytes", os.O_RDONLY) for p in ports for d in ("rx", "tx")]
while True:
    row = [repr(time.time())] + [os.pread(fd, 32, 0).decode().strip() for fd in fds]
    sys.stdout.write(" ".join(row) + "\n")
    sys.stdout.flush()
    time.sleep(period)
"""

#: one torch DDP rank: argv rank world master_addr port steps hidden(comma) batch data lr
TORCH_RANK = r"""
import json, sys, time
import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

rank, world, addr, port, steps = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
hidden, batch, data, lr = [int(h) for h in sys.argv[6].split(",")], int(sys.argv[7]), sys.argv[8], float(sys.argv[9])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
torch.manual_seed(0)
sizes = [784, *hidden, 10]
layers = []
for a, b in zip(sizes, sizes[1:]):
    layers += [nn.Linear(a, b), nn.ReLU()]
model = DistributedDataParallel(nn.Sequential(*layers[:-1]))
opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
with np.load(data) as d:
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"].astype(np.int64))
per, n = batch // world, len(x)
times = []
for step in range(steps):
    lo = (step * batch + rank * per) % (n - per + 1)
    loss = nn.functional.cross_entropy(model(x[lo:lo + per]), y[lo:lo + per])
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.time())
print(json.dumps({"rank": rank, "times": times, "params": sum(p.numel() for p in model.parameters())}), flush=True)
dist.destroy_process_group()
"""


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def model_params(hidden: list[int]) -> int:
    sizes = [IN, *hidden, OUT]
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


class Links:
    """The bridge ports' byte counters of every host, sampled in the background; ``between(t0, t1)``
    is what crossed each host's link in that window (counters interpolated at its ends)."""

    def __init__(self, c: nc.Cluster, where: Path, period: float = 0.005) -> None:
        self.hosts = len(c.hosts)
        self.path = where / f"links-{time.monotonic_ns()}.txt"
        self._out = open(self.path, "w")
        # niced up: a sampler a busy machine leaves unscheduled blurs the window's ends
        self.proc = subprocess.Popen(["nice", "-n", "-10", "ip", "netns", "exec", c.bridge_ns, sys.executable, "-c",
                                      SAMPLER, str(period),
                                      *(h.port for h in c.hosts)], stdout=self._out, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._out.close()

    def between(self, t0: float, t1: float) -> tuple[list[dict[str, float]], float]:
        """Per host: ``sent`` and ``received`` bytes in [t0, t1]; and the longer of the gaps
        between the samples around t0 and t1 (what crossed in it is the figures' uncertainty)."""
        rows = [line.split() for line in self.path.read_text().splitlines()]
        a = np.array([[float(v) for v in r] for r in rows if len(r) == 1 + 2 * self.hosts])
        if len(a) < 2 or not a[0, 0] <= t0 < t1 <= a[-1, 0]:
            raise SystemExit(f"the link samples ({len(a)}) do not cover the window {t0:.3f}..{t1:.3f}")
        at = [np.interp([t0, t1], a[:, 0], a[:, k]) for k in range(1, a.shape[1])]
        edges = np.searchsorted(a[:, 0], [t0, t1])
        gap = float(max(a[e, 0] - a[max(e - 1, 0), 0] for e in edges))
        return [{"sent": at[2 * i][1] - at[2 * i][0], "received": at[2 * i + 1][1] - at[2 * i + 1][0]}
                for i in range(self.hosts)], gap


def _mariana(*args: str) -> list[str]:
    return [sys.executable, "-m", "mariana", *args]


def _tail(path: Path, n: int = 2000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _wait_all(procs: list[subprocess.Popen], logs: list[Path], what: str) -> None:
    """Wait for every process to end 0 (killing them all past RUN_TIMEOUT or at the first failure)."""
    failed = nc.wait_all(procs, logs, RUN_TIMEOUT)
    if failed:
        raise SystemExit(f"{what}: {failed}")


def make_keys(where: Path, n: int, env: dict[str, str]) -> Path:
    """The CURVE keys as the docs make them: the master's and one per worker host."""
    keys = where / "keys"
    subprocess.run(_mariana("keys", "init", str(keys)), env=env, check=True, capture_output=True)
    for i in range(1, n + 1):
        subprocess.run(_mariana("keys", "add", str(keys), f"host{i}"), env=env, check=True, capture_output=True)
    return keys


def run_mariana(c: nc.Cluster, where: Path, n: int, env: dict[str, str], data: Path, hidden: list[int], steps: int,
                keys: Path | None, port: int) -> Path:
    """dnn-dp with the master on host 0 and a worker on each of hosts 1..n; its run directory."""
    h0 = c.hosts[0]
    where.mkdir(parents=True)
    run, master_file = where / "run", where / "master.json"
    model = json.dumps([f"dense:{h}:relu" for h in hidden] + [f"dense:{OUT}"])
    sets = [f"data={data}", f"model={model}", f"batch_size={BATCH}", f"steps={steps}", "test_fraction=0", f"lr={LR}"]
    security = ["--keys", str(keys)] if keys else ["--insecure"]
    logs, procs = [where / "master.log"], []
    with open(logs[0], "wb") as log:
        procs.append(h0.popen(_mariana("master", "dnn-dp", "--bind", f"tcp://{h0.address}:{port}", "--workers", str(n),
                                       *security, "--master-file", str(master_file), "--run-dir", str(run),
                                       *(a for s in sets for a in ("--set", s))),
                              env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + 60
    while not (master_file.exists() and master_file.stat().st_size > 0):
        if procs[0].poll() is not None or time.monotonic() > deadline:
            _wait_all(procs, logs, "mariana master")
        time.sleep(0.05)
    for i in range(1, n + 1):
        h = c.hosts[i]
        auth = ["--key", str(keys / f"host{i}.key_secret")] if keys else ["--insecure"]
        logs.append(where / f"worker-h{i}.log")
        with open(logs[-1], "wb") as log:
            procs.append(h.popen(_mariana("worker", "--master-file", str(master_file), *auth, "--host", h.address),
                                 env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    _wait_all(procs, logs, f"mariana dnn-dp on {n} hosts")
    return run


def mariana_figures(run: Path, warmup: int) -> dict[str, Any]:
    """The steady-state window of a dnn-dp run and its bytes per member and step, from its traces.

    A step's first superstep carries its loss aggregate; its last parts (the scatter's, then the
    gather's) arrive before the next step's first superstep computes. The window runs from the
    moment every worker has its inbox for the first measured step (its start plus its wait, on
    the machine's clock) to the same moment of the superstep after the last step (or the run's
    end): no part is in flight at either end, so each link's counters hold whole steps."""
    master = [json.loads(line) for line in (run / "trace" / "master.jsonl").read_text().splitlines() if line.strip()]
    firsts = [r["superstep"] for r in master if "loss" in (r.get("aggregates") or {})]
    if len(firsts) < warmup + 1 or len(firsts) < 2:
        raise SystemExit(f"{run}: {len(firsts)} steps in the trace, warm-up {warmup}")
    per_step = firsts[-1] - firsts[-2]  # supersteps a step takes
    lo, hi = firsts[warmup], firsts[-1] + per_step  # [lo, hi): the measured steps' supersteps
    traces = {int(p.stem.split("-")[1]): [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
              for p in sorted((run / "trace").glob("worker-*.jsonl"))}

    def inbox_ready(ss: int) -> float | None:
        """When the last worker had superstep ``ss``'s inbox (None: no such superstep)."""
        at = [r["start"] - r.get("clock_offset_s", 0.0) + r.get("wait_s", 0.0)
              for records in traces.values() for r in records if r["superstep"] == ss]
        return max(at) if len(at) == len(traces) else None

    t0, t1 = inbox_ready(lo), inbox_ready(hi)
    if t0 is None:
        raise SystemExit(f"{run}: superstep {lo} missing from the workers' traces")
    if t1 is None:  # the run ended with the last step: its last parts were in when the master ended
        t1 = master[-1]["end"]
    steps = len(firsts) - warmup
    sent = [sum(b for r in records if lo <= r["superstep"] < hi
                for peer, b in r.get("bytes_out", {}).items() if int(peer) != w) / steps
            for w, records in sorted(traces.items())]
    return {"t0": t0, "t1": t1, "steps": steps, "step_s": (t1 - t0) / steps, "trace_bytes_per_member": sent}


def run_torch(c: nc.Cluster, where: Path, n: int, env: dict[str, str], data: Path, hidden: list[int], steps: int,
              warmup: int, port: int) -> dict[str, Any]:
    """torch DDP (gloo), rank r on host r + 1; the steady-state window from rank 0's clock."""
    where.mkdir(parents=True)
    addr = c.hosts[1].address
    env = {**env, "GLOO_SOCKET_IFNAME": "eth0"}
    logs, procs, outs = [], [], []
    for r in range(n):
        logs.append(where / f"rank{r}.log")
        outs.append(where / f"rank{r}.json")
        with open(logs[-1], "wb") as log, open(outs[-1], "wb") as out:
            procs.append(c.hosts[r + 1].popen(
                [sys.executable, "-c", TORCH_RANK, str(r), str(n), addr, str(port), str(steps),
                 ",".join(map(str, hidden)), str(BATCH), str(data), str(LR)],
                env=env, stdout=out, stderr=log, stdin=subprocess.DEVNULL))
    _wait_all(procs, logs, f"torch DDP on {n} hosts")
    times = json.loads(outs[0].read_text().strip().splitlines()[-1])["times"]
    t0, t1 = times[warmup - 1], times[-1]
    return {"t0": t0, "t1": t1, "steps": steps - warmup, "step_s": (t1 - t0) / (steps - warmup)}


def link_figures(links: Links, t0: float, t1: float, steps: int, n: int, rate: str) -> dict[str, Any]:
    per, gap = links.between(t0, t1)
    busiest = max(max(h["sent"], h["received"]) for h in per) / steps
    limit = busiest * 8 / nc.rate_bits(rate)
    return {"busiest_link_bytes": busiest, "link_limit_s": limit, "link_sample_gap_s": gap,
            "wire_bytes_per_member": [per[i]["sent"] / steps for i in range(1, n + 1)],
            "links_per_step": [{k: v / steps for k, v in h.items()} for h in per[:n + 1]]}


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    hidden = [64] * 3 if args.smoke else [args.width] * 3
    steps = args.warmup + args.steps
    model_bytes = model_params(hidden) * 4
    top = max(args.hosts)
    rng = np.random.default_rng(0)
    data = tmp / "synthetic.npz"
    rows = max(BATCH * steps, 2048)
    np.savez(data, x=rng.standard_normal((rows, IN), dtype=np.float32), y=rng.integers(0, OUT, rows))
    one_thread = {**os.environ, **{k: "1" for k in THREAD_VARS}}
    keys = None if args.plaintext else make_keys(tmp, top, one_thread)
    result: dict[str, Any] = {
        "model": [IN, *hidden, OUT], "model_bytes": model_bytes, "batch": BATCH, "warmup": args.warmup,
        "steps": args.steps, "cores": len(os.sched_getaffinity(0)), "curve": keys is not None,
        "blas_env": {v: os.environ.get(v) for v in BLAS_VARS}, "load_start": os.getloadavg()[0], "runs": []}
    port = 7300
    with nc.Cluster(top + 1, rate=args.rates[0]) as c:
        links = Links(c, tmp)
        try:
            for variant, env in variant_envs(args.variants or ("env" if args.smoke else "auto"), one_thread):
                for rate in args.rates:
                    for i in range(len(c.hosts)):
                        c.shape(i, rate)
                    for n in args.hosts:
                        for system in ("mariana", *(() if args.no_torch else ("torch",))):
                            port += 1
                            progress(f"{variant}: {system} on {n} hosts at {rate}, {steps} steps")
                            where = tmp / f"{variant}-{rate}-{n}-{system}"
                            if system == "mariana":
                                run = run_mariana(c, where, n, env, data, hidden, steps, keys, port)
                                fig = mariana_figures(run, args.warmup)
                            else:
                                fig = run_torch(c, where, n, env, data, hidden, steps, args.warmup, port)
                            fig.update(link_figures(links, fig["t0"], fig["t1"], fig["steps"], n, rate))
                            fig.update(system=system, variant=variant, rate=rate, hosts=n,
                                       samples_s=BATCH / fig["step_s"], limit_over_time=fig["link_limit_s"] / fig["step_s"],
                                       bound_bytes=2 * (n - 1) / n * model_bytes)
                            result["runs"].append(fig)
        finally:
            links.stop()
    result["load_end"] = os.getloadavg()[0]
    return result


def table(result: dict[str, Any]) -> str:
    mb = 1e6
    out = [f"dnn-dp across emulated hosts, MLP {'-'.join(map(str, result['model']))} "
           f"({result['model_bytes'] / mb:.1f} MB), batch {result['batch']}, {result['steps']} steps after "
           f"{result['warmup']} warm-up, 1 BLAS thread per process, {result['cores']} cores, "
           f"{'CURVE' if result['curve'] else 'plaintext'}, load {result['load_start']:.2f} -> {result['load_end']:.2f}",
           f"  {'variant':8} {'rate':8} {'N':>3} {'system':8} {'s/step':>7} {'samples/s':>9} {'busiest MB':>10} "
           f"{'limit s':>7} {'lim/time':>8} {'sent MB/mbr':>11} {'wire MB':>8} {'2(N-1)/N MB':>11} "
           f"{'sent/bound':>10} {'gap ms':>6} {'vs torch':>8}"]
    torch = {(r["variant"], r["rate"], r["hosts"]): r for r in result["runs"] if r["system"] == "torch"}
    for r in result["runs"]:
        sent = np.mean(r["trace_bytes_per_member"]) if "trace_bytes_per_member" in r else None
        peer = torch.get((r["variant"], r["rate"], r["hosts"])) if r["system"] == "mariana" else None
        out.append(f"  {r['variant']:8} {r['rate']:8} {r['hosts']:>3} {r['system']:8} {r['step_s']:7.3f} "
                   f"{r['samples_s']:9.1f} {r['busiest_link_bytes'] / mb:10.1f} {r['link_limit_s']:7.3f} "
                   f"{r['limit_over_time']:8.2f} "
                   + (f"{sent / mb:11.1f}" if sent is not None else f"{'':11}")
                   + f" {np.mean(r['wire_bytes_per_member']) / mb:8.1f} {r['bound_bytes'] / mb:11.1f} "
                   + (f"{sent / r['bound_bytes']:10.3f}" if sent is not None else f"{'':10}")
                   + f" {r['link_sample_gap_s'] * 1e3:6.1f}"
                   + (f" {r['samples_s'] / peer['samples_s']:8.2f}" if peer else ""))
    out.append(f"  targets: lim/time >= {LIMIT_TARGET} (time per step within 1/0.8 of the busiest link's limit); "
               f"mariana/torch samples/s >= {TORCH_TARGET}; sent/bound <= 1 plus headers; gap: the link samples' widest "
               f"gap at the window's ends")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true",
                    help="2 hosts, 784-64x3-10, 1 + 2 steps, one rate and BLAS variant, no torch: CI smoke run, no figures")
    ap.add_argument("--hosts", type=int, nargs="+", default=None, help="worker hosts (default 2 4 8; --smoke: 2)")
    ap.add_argument("--rates", nargs="+", default=None, help="link rates, tc units (default 1gbit 200mbit)")
    ap.add_argument("--width", type=int, default=2048, help="hidden units of each of the 3 layers (default 2048)")
    ap.add_argument("--steps", type=int, default=None, help="measured steps (default 3; --smoke: 2)")
    ap.add_argument("--warmup", type=int, default=None, help="steps left out first (default 2; --smoke: 1)")
    ap.add_argument("--variants", choices=["auto", "env", "unset", "both"], default=None,
                    help="BLAS environment: as is, OPENBLAS_* removed, both (default auto: both where set)")
    ap.add_argument("--no-torch", action="store_true", help="leave out the torch DDP peer")
    ap.add_argument("--plaintext", action="store_true", help="mariana without CURVE (--insecure)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.hosts = args.hosts or ([2] if args.smoke else [2, 4, 8])
    args.rates = args.rates or (["1gbit"] if args.smoke else ["1gbit", "200mbit"])
    args.steps = args.steps or (2 if args.smoke else 3)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 2)
    args.no_torch = args.no_torch or args.smoke
    if args.warmup < 1 or min(args.hosts) < 2:
        ap.error("--warmup must be >= 1 and every --hosts >= 2")
    for rate in args.rates:
        try:
            nc.rate_bits(rate)
        except ValueError as exc:
            ap.error(str(exc))
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            ap.error("torch is not installed (pip install -e '.[torch-ref]'), or pass --no-torch")
    reason = nc.why_not()
    if reason:
        print(f"bench/cluster.py: skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mariana-cluster-bench-") as tmp:
        result = measure(args, Path(tmp))
    print(json.dumps(result) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
