"""``mariana data``: write shards (``shard``), fetch a named data set (``get``), describe and check
a sharded data set (``info``)."""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError

__all__ = ["cmd_data", "add_data_parser"]


def add_data_parser(sub: argparse._SubParsersAction, parser_class: type) -> None:
    d = sub.add_parser("data", help="training data: write shards, fetch the standard data sets, check shards")
    dsub = d.add_subparsers(dest="data_command", required=True, parser_class=parser_class)
    sh = dsub.add_parser("shard", help="write a data set as .npz shards plus index.json (sample counts, shapes, "
                                        "dtypes, sha256 per shard)")
    sh.add_argument("source", metavar="IN", help="an .npz (x, y, optionally x_test, y_test), a directory of IDX files "
                    "(MNIST layout, gzipped or not), CIFAR-10 binary batches, or a named data set (fashion-mnist, ...)")
    sh.add_argument("--to", required=True, metavar="DIR", help="output directory (any fsspec URL)")
    sh.add_argument("--shard-mb", type=float, default=64.0, metavar="MB", help="about this many MB per shard (default 64)")
    sh.add_argument("--shuffle-seed", type=int, default=None, metavar="S", help="shuffle each split with this seed first")
    sh.add_argument("--test-fraction", type=float, default=0.0, metavar="F",
                    help="a source without a test split: hold out this share of it (seeded by --shuffle-seed, else 0)")
    sh.add_argument("--data-dir", metavar="DIR", help="where named data sets' files are looked for first")
    sh.add_argument("--json", action="store_true", help="print the index as JSON")
    g = dsub.add_parser("get", help="make a named data set available: find its files or download them (checksum checked)")
    g.add_argument("name", metavar="NAME")
    g.add_argument("--data-dir", metavar="DIR", help="where its files are looked for first")
    g.add_argument("--no-download", dest="download", action="store_false", help="only look, never download")
    i = dsub.add_parser("info", help="a sharded data set's splits, shapes and classes; checks every field of its index "
                                      "against the shards, every label, and every shard's sha256")
    i.add_argument("data", metavar="DATA", help="shard directory (with its index.json), glob or list")
    i.add_argument("--no-verify", dest="verify", action="store_false", help="sizes and headers only, no sha256")
    i.add_argument("--json", action="store_true")


def cmd_data(args: argparse.Namespace) -> int:
    import numpy as np

    from ..vertices.train.named import DATASETS, get_files, named_shards
    from ..vertices.train.shards import open_shards, read_idx_dir, read_source, write_shards

    if args.data_command == "get":
        if args.name not in DATASETS:
            raise UsageError(f"unknown data set {args.name!r}; named data sets: {', '.join(DATASETS)}")
        where = get_files(args.name, args.data_dir, args.download)
        shards = named_shards(args.name, args.data_dir, False)
        print(f"{args.name}: files in {where}, shards in {shards}")
        return 0
    if args.data_command == "info":
        ss = open_shards(args.data, verify=args.verify)
        info = {"data": args.data, "classes": ss.classes, "x_shape": list(ss.input_shape),
                "x_dtype": str(ss.train.x_dtype), "train": ss.train.size, "test": ss.test.size if ss.test else 0,
                "shards": len({s.url for s in ss.train.shards} | ({s.url for s in ss.test.shards} if ss.test else set())),
                "indexed": bool(ss.meta), "verified": args.verify and bool(ss.meta)}
        checked = (", every sha256 matches its index" if info["verified"] else
                   ", sizes, headers and labels match its index (sha256 not checked: --no-verify)" if ss.meta else
                   ", no index: headers and labels read, no sha256 to check")
        print(json.dumps(info, indent=2) if args.json else
              f"{args.data}: {info['train']} train + {info['test']} test samples of shape {tuple(info['x_shape'])} "
              f"{info['x_dtype']}, {info['classes']} classes, {info['shards']} shard(s)" + checked)
        return 0
    if not 0.0 <= args.test_fraction < 1.0:
        raise UsageError(f"--test-fraction must be in [0, 1), got {args.test_fraction}")
    if args.source in DATASETS:
        src = str(get_files(args.source, args.data_dir, False))
        train, test = read_idx_dir(src) if DATASETS[args.source].kind == "idx" else read_source(src)[:2]
        kind = DATASETS[args.source].kind
    else:
        src = args.source
        train, test, kind = read_source(src)
    if test is None and args.test_fraction:
        order = np.random.default_rng(args.shuffle_seed or 0).permutation(len(train[0]))
        n_test = int(round(len(order) * args.test_fraction))
        te, tr = np.sort(order[:n_test]), np.sort(order[n_test:])
        train, test = (train[0][tr], train[1][tr]), (train[0][te], train[1][te])
    index = write_shards(args.to, train, test, args.shard_mb, args.shuffle_seed, source=src)
    if args.json:
        print(json.dumps(index, indent=1))
        return 0
    for name, entries in index["splits"].items():
        print(f"{name}: {sum(e['samples'] for e in entries)} samples in {len(entries)} shard(s)")
    print(f"wrote {args.to}/index.json ({kind} source {src}: x {tuple(index['x_shape'])} {index['x_dtype']}, "
          f"{index['classes']} classes)")
    return 0
