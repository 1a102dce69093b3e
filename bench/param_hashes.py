"""Fingerprints of the reference configs: a refactor that claims "behaviour unchanged" proves it.

    python bench/param_hashes.py > before.json       # on the old commit
    python bench/param_hashes.py > after.json        # on the new one
    python bench/param_hashes.py --compare before.json after.json

Runs every dnn-dp exchange x optimizer, cnn-hybrid, cpu-cluster (2 workers, the cluster runtime,
a short run on the bundled digits) and the graph jobs (pagerank, sssp, wcc in block and vertex
mode), through the ``mariana`` command as a user would, and prints one sha256 per config: of the
exported parameters (every tensor's name, dtype, shape and bytes) or of the output file. Not a
timing benchmark: ``--smoke`` runs three configs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

EXCHANGES = ["linear", "tree", "ps", "allreduce"]
OPTIMIZERS = ["sgd", "momentum", "adagrad", "adagrad_dp", "adagrad_approx", "adam", "adamw"]
SHORT = ["epochs=1", "batch_size=64"]


def configs(smoke: bool) -> list[tuple[str, str, list[str]]]:
    """(name, job, --set values) of every reference config."""
    out = [(f"dnn-dp/{x}/{o}", "dnn-dp", [*SHORT, "replicas=2", f"exchange={x}", f"optimizer={o}"])
           for x in EXCHANGES for o in OPTIMIZERS]
    # the defaults (exchange=auto: allreduce at 2 replicas; optimizer=momentum): the hash of dnn-dp/linear/momentum
    out += [("dnn-dp/default", "dnn-dp", [*SHORT, "replicas=2"])]
    out += [("cnn-hybrid/g1p2", "cnn-hybrid", [*SHORT, "groups=1", "partitions=2"]),
            ("cpu-cluster/g1k2", "cpu-cluster", [*SHORT, "groups=1", "workers_per_group=2"])]
    out += [(f"{job}/{mode}", job, [f"mode={mode}", *(["source=amsterdam"] if job == "sssp" else [])])
            for job in ("pagerank", "sssp", "wcc") for mode in ("block", "vertex")]
    return [out[0], out[-6], out[-1]] if smoke else out


def fingerprint(name: str, job: str, sets: list[str], tmp: Path) -> str:
    run, out = tmp / name.replace("/", "-"), tmp / (name.replace("/", "-") + ".out")
    graph = job in ("pagerank", "sssp", "wcc")
    cmd = [sys.executable, "-m", "mariana", "-q", "run", job, "--workers", "2", "--run-dir", str(run)]
    for s in sets + ([f"output={out}"] if graph else []):
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    h = hashlib.sha256()
    if graph:
        h.update(out.read_bytes())
        return h.hexdigest()
    npz = tmp / (name.replace("/", "-") + ".npz")
    subprocess.run([sys.executable, "-m", "mariana", "-q", "params", "export", str(run), "--to", str(npz)],
                   check=True, stdout=subprocess.DEVNULL)
    with np.load(npz) as params:
        for key in sorted(params.files):
            a = params[key]
            h.update(f"{key}:{a.dtype}:{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="three configs only")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two saved outputs and exit")
    args = ap.parse_args()
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        differ = sorted(k for k in before if after.get(k) != before[k])
        missing = sorted(set(before) ^ set(after))
        print(f"{len(before)} configs: {len(before) - len(differ)} identical, {len(differ)} differ"
              + (f": {', '.join(differ)}" if differ else "") + (f"; only in one: {missing}" if missing else ""))
        return 1 if differ else 0
    os.environ.setdefault("MARIANA_NO_FORK", "0")
    hashes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, job, sets in configs(args.smoke):
            hashes[name] = fingerprint(name, job, sets, Path(tmp))
            print(f"{name:32s} {hashes[name][:16]}", file=sys.stderr)
    print(json.dumps(hashes, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
