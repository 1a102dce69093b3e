"""The ``mariana`` command line: every subcommand, its flags and their help."""

from __future__ import annotations

import argparse
import logging

from .. import __version__
from ..errors import UsageError

log = logging.getLogger("mariana")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep one line, no usage dump
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mariana", description="Mariana-BSP: a Bulk Synchronous Parallel vertex/message engine")
    p.add_argument("--version", action="version", version=f"mariana-bsp {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a job")
    _job_args(r)
    r.add_argument("--resume", metavar="RUN", help="continue the run in RUN from its newest valid checkpoint")
    r.add_argument("--runtime", choices=["local", "cluster", "inproc"], default=None,
                   help="local: every partition in this process; cluster: one process per worker; "
                        "inproc: the cluster runtime with its workers as threads of this process over inproc:// "
                        "(the whole wire path without processes or network; default: local for 1 worker, cluster for more)")
    r.add_argument("--explain-placement", action="store_true", help="print the placement table and exit")
    r.add_argument("--secure", action="store_true",
                   help="CURVE authentication and encryption on every socket (keys made for this run)")
    r.add_argument("--no-fork", dest="fork", action="store_false",
                   help="start local workers as fresh interpreters (by default they are forked from this process, "
                        "with everything imported, when that is safe; MARIANA_NO_FORK=1 does the same)")

    m = sub.add_parser("master", help="run a job's master; workers join from any host")
    _job_args(m)
    m.add_argument("--bind", default=None, metavar="tcp://HOST:PORT",
                   help="control endpoint (default: loopback, random port; with --from-env: MASTER_ADDR:MASTER_PORT)")
    m.add_argument("--keys", metavar="DIR", help="CURVE keys from `mariana keys init DIR` (required off loopback)")
    m.add_argument("--secure", action="store_true", help="use --keys on loopback too")
    m.add_argument("--insecure", action="store_true",
                   help="allow a plaintext master off loopback (only on a network you trust)")
    m.add_argument("--master-file", metavar="FILE", help="where to write the endpoint (+ public key with --keys; default DIR/master.json)")
    _from_env_args(m, master=True)

    w = sub.add_parser("worker", help="join a master as one worker")
    w.add_argument("--master", metavar="tcp://HOST:PORT")
    w.add_argument("--master-file", metavar="FILE", help="the master's endpoint and public key (from `mariana master`, "
                   "or from `mariana sweep --listen`: then this host serves the sweep as --sweep does)")
    w.add_argument("--sweep", metavar="tcp://HOST:PORT", help="join a sweep's queue (`mariana sweep --listen`) and run "
                   "one of its trials' workers after another until the sweep ends (then exit 0)")
    w.add_argument("--server-key", metavar="KEY", help="the master's public key: a .key file or its z85 text "
                   "(write --server-key=KEY: a key may start with '-')")
    w.add_argument("--key", metavar="FILE.key_secret", help="this worker's secret key (`mariana keys add`)")
    w.add_argument("--job", help="refuse to serve a master that runs another job")
    w.add_argument("--host", default=None, help="address to bind this worker's data socket on, and to tell its "
                   "peers (default: this host's address on the route to the master; 127.0.0.1 for a master on loopback)")
    w.add_argument("--advertise", metavar="ADDRESS", default=None,
                   help="the address peers reach this worker's data socket at, where it is not the bound one "
                        "(behind NAT, a container's address); the port stays the bound one")
    w.add_argument("--insecure", action="store_true",
                   help="allow a plaintext data socket off loopback (only on a network you trust)")
    w.add_argument("--connect-timeout", type=float, default=60.0, metavar="S", help="give up joining after S seconds")
    w.add_argument("--first-contact-timeout", type=float, default=None, metavar="S",
                   help="give up after S seconds if nothing accepts a connection at the master's address (default 5: "
                        "cluster.joining.FIRST_CONTACT_S; with --from-env, whose ranks start together: --connect-timeout)")
    w.add_argument("--max-message-mb", type=int, default=1024, metavar="MB", help="largest frame accepted (MAXMSGSIZE)")
    w.add_argument("--threads", type=int, default=None, metavar="N",
                   help="BLAS/OpenMP threads of this worker (default: as `mariana run` gives its workers: this host's "
                        "cores divided among the job's workers on it; OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, "
                        "MKL_NUM_THREADS, BLIS_NUM_THREADS where set)")
    _from_env_args(w, master=False)

    k = sub.add_parser("keys", help="CURVE keys for secure multi-host jobs")
    ksub = k.add_subparsers(dest="keys_command", required=True, parser_class=_Parser)
    ki = ksub.add_parser("init", help="the master's keypair and an empty allow-list DIR/allowed/")
    ki.add_argument("dir", metavar="DIR")
    ka = ksub.add_parser("add", help="a worker keypair DIR/NAME.key_secret, its public key allowed")
    ka.add_argument("dir", metavar="DIR")
    ka.add_argument("name", metavar="NAME")

    t = sub.add_parser("trace", help="inspect the superstep traces of a run")
    tsub = t.add_subparsers(dest="trace_command", required=True, parser_class=_Parser)
    ts = tsub.add_parser("summary", help="time by phase, messages, stragglers, slowest superstep, flags")
    ts.add_argument("run", metavar="RUN")
    ts.add_argument("--json", action="store_true")
    tw = tsub.add_parser("show", help="everything known about one superstep (or one worker or vertex in it)")
    tw.add_argument("run", metavar="RUN")
    tw.add_argument("--superstep", type=int, required=True, metavar="S")
    tw.add_argument("--worker", type=int, metavar="K")
    tw.add_argument("--vertex", metavar="ID")
    tw.add_argument("--json", action="store_true")
    te = tsub.add_parser("export", help="one merged Chrome Trace Event file (opens in Perfetto)")
    te.add_argument("run", metavar="RUN")
    te.add_argument("--chrome", required=True, metavar="OUT.json")
    tr = tsub.add_parser("replay", help="rerun one vertex's compute from a checkpoint on its captured messages")
    tr.add_argument("run", metavar="RUN")
    tr.add_argument("--vertex", required=True, metavar="ID")
    tr.add_argument("--superstep", type=int, required=True, metavar="S")
    tr.add_argument("--pdb", action="store_true", help="step through compute at superstep S in pdb")
    tr.add_argument("--json", action="store_true")

    c = sub.add_parser("checkpoint", help="inspect the checkpoints of a run")
    csub = c.add_subparsers(dest="checkpoint_command", required=True, parser_class=_Parser)
    cl = csub.add_parser("list", help="superstep, time, size and validity of every checkpoint")
    cl.add_argument("run", metavar="RUN")
    cl.add_argument("--no-verify", dest="verify", action="store_false",
                    help="read the manifests only (sizes, times), not every part's sha256: fast on big runs")
    cl.add_argument("--json", action="store_true")

    pa = sub.add_parser("params", help="read the model parameters of a run")
    psub = pa.add_subparsers(dest="params_command", required=True, parser_class=_Parser)
    pe = psub.add_parser("export", help="write the model as one .npz of named arrays (0.W, 0.b, ...): the final "
                         "parameters, else the newest snapshot of a run still training")
    pe.add_argument("run", metavar="RUN", help="run directory (any fsspec URL)")
    pe.add_argument("--to", required=True, metavar="FILE.npz")
    pe.add_argument("--checkpoint", type=int, metavar="SUPERSTEP",
                    help="the model as of this checkpoint (its RUN/params snapshot, or the checkpoint itself)")

    from .sweep import add_sweep_parser  # issue 21: `mariana sweep`

    add_sweep_parser(sub, _job_args)

    rp = sub.add_parser("report", help="one self-contained HTML file about a run: curves, timeline, stragglers, ...")
    rp.add_argument("run", metavar="RUN", help="run directory (any fsspec URL; a run still going is fine)")
    rp.add_argument("--out", default=None, metavar="FILE.html", help="where to write it (default RUN/report.html)")
    rp.add_argument("--json", action="store_true", help="print what was written as JSON on stdout")
    ui = sub.add_parser("ui", help="serve the job page of a run directory (running or finished) until Ctrl-C")
    ui.add_argument("run", metavar="RUN", help="run directory (any fsspec URL)")
    ui.add_argument("--bind", default="127.0.0.1:0", metavar="HOST:PORT", help="default: loopback, a free port")

    from .data import add_data_parser

    add_data_parser(sub, _Parser)

    j = sub.add_parser("jobs", help="list the jobs and their config keys (one job's keys: `mariana jobs JOB`)")
    j.add_argument("job", nargs="?", metavar="JOB", help="show only this job's keys: a built-in name or "
                   "package.module:attribute")
    j.add_argument("--json", action="store_true", help="print as JSON on stdout (with JOB: one object, else a list)")
    return p


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", nargs="?", help="a built-in job (see `mariana jobs`) or package.module:attribute")
    p.add_argument("--config", metavar="FILE.toml", help="config keys (top level or a [JOB] table)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key; VALUE is parsed as TOML, else taken as a string")
    p.add_argument("--workers", type=int, default=None, help="number of partitions (default 1)")
    p.add_argument("--placement", choices=["hash", "range"], default=None, help="how vertices go to workers")
    p.add_argument("--run-dir", metavar="URL", help="run directory (any fsspec URL); default runs/JOB-TIMESTAMP")
    p.add_argument("--resume-if-possible", action=argparse.BooleanOptionalAction, default=None,
                   help="if --run-dir holds a valid checkpoint of this same job and config, continue from it "
                        "(a restarted master: Slurm requeue, a Kubernetes restart); on by default with --from-env")
    p.add_argument("--max-supersteps", type=int, default=None, metavar="N")
    p.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="S", help="cluster heartbeat period")
    p.add_argument("--worker-timeout", type=float, default=10.0, metavar="S",
                   help="a worker silent this long fails the job (cluster)")
    p.add_argument("--no-trace", dest="trace", action="store_false",
                   help="do not write superstep traces to RUN/trace (they cost < 3%%)")
    p.add_argument("--capture", metavar="VERTEX_GLOB",
                   help="store the messages of matching vertices for `mariana trace replay`")
    p.add_argument("--capture-limit-mb", type=int, default=64, metavar="MB", help="bound on captured data")
    p.add_argument("--superstep-timeout", type=float, default=None, metavar="S",
                   help="a superstep longer than S seconds is a hang: report who is missing, then fail or recover")
    p.add_argument("--max-restarts", type=int, default=3, metavar="N",
                   help="roll back to the newest checkpoint at most N times when a worker is lost (cluster)")
    p.add_argument("--rejoin-timeout", type=float, default=60.0, metavar="S",
                   help="how long a lost remote worker's partition waits for a new `mariana worker`")
    p.add_argument("--max-message-mb", type=int, default=1024, metavar="MB",
                   help="largest frame a socket accepts (ZMQ MAXMSGSIZE); arrays travel in 4 MB frames")
    p.add_argument("--no-shm", dest="shm", action="store_false",
                   help="send every frame through zmq, even between workers on one machine (by default "
                        "frames of 64 KB or more to a same-host worker go through /dev/shm; never with --secure)")
    p.add_argument("--shm-cap-mb", type=int, default=1024, metavar="MB",
                   help="shared memory per worker for outgoing frames; beyond it frames travel through zmq")
    p.add_argument("--json", action="store_true", help="print the result summary as JSON on stdout")
    p.add_argument("--ui", nargs="?", const="127.0.0.1:0", default=None, metavar="HOST:PORT",
                   help="serve a live job page (state, workers, counters, curves; JSON at /api/state); "
                        "default loopback, a free port; the URL goes to stderr")
    p.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard scalars to DIR (needs tensorboardX)")
    p.add_argument("--data-dir", metavar="DIR", help="where named data sets (data=fashion-mnist, ...) are looked for "
                   "first (sets MARIANA_DATA; then /usr/share/datasets, then the download cache)")


def _from_env_args(p: argparse.ArgumentParser, master: bool) -> None:
    what = ("rank 0 runs the master and a worker, every other rank a worker: one command for every task"
            if master else "the master's address from the environment")
    p.add_argument("--from-env", choices=["slurm", "torchrun"], default=None,
                   help=f"rank, world size and master address from SLURM_* or RANK/WORLD_SIZE/MASTER_ADDR/"
                        f"MASTER_PORT ({what})")
    if master:
        p.add_argument("--worker-key", metavar="FILE.key_secret",
                       help="with --from-env and --keys: each rank's secret key, {rank} replaced by the rank "
                            "(default DIR/worker-{rank}.key_secret, from `mariana keys add DIR worker-RANK`)")
        p.add_argument("--connect-timeout", type=float, default=60.0, metavar="S",
                       help="with --from-env: a worker rank gives up joining after S seconds")
