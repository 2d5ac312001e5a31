"""``python -m runner datasets {check,prepare,list}`` (also ``python -m runner.datasets ...``).

check: exit 0 and a summary line (or the manifest with --json) when the dataset
is complete, 1 with one line on stderr when it is missing or incomplete, 2 for
an unknown name or a --data path that cannot be one (a name over 255 bytes, a link loop).
"""

from __future__ import annotations

import json
import sys

from runner.datasets import BENCHMARKS, DATASETS, NotPrepared, check, resolve


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="datasets_command", metavar="ACTION")
    c = sub.add_parser("check", help="check that a prepared dataset is complete")
    c.add_argument("name", help="dataset or benchmark name")
    c.add_argument("--data", required=True, help="data root (or the dataset's folder)")
    c.add_argument("--deep", action="store_true", help="also verify the sha256 of every array file")
    c.add_argument("--json", action="store_true", help="print the manifest")
    from runner.datasets import prepare

    prepare.add_arguments(sub.add_parser("prepare", help="prepare a dataset from its verified archives"))
    sub.add_parser("list", help="the datasets and which benchmark reads which")


def main(args) -> int:
    cmd = getattr(args, "datasets_command", None)
    if cmd == "list":
        for ds, (title, _) in DATASETS.items():
            users = [b for b, d in BENCHMARKS.items() if d == ds]
            print(f"{ds:<9} {title:<20} {', '.join(users)}")
        return 0
    if cmd == "prepare":
        from runner.datasets import prepare

        return prepare.main(args)
    if cmd != "check":
        print("runner datasets: give an action: check, prepare or list", file=sys.stderr)
        return 2
    try:
        resolve(args.name)
    except ValueError as exc:
        print(f"runner datasets check: {exc}", file=sys.stderr)
        return 2
    from runner.cli import path_problem

    problem = path_problem(args.data)
    if problem:
        print(f"runner datasets check: --data {problem}", file=sys.stderr)
        return 2
    try:
        doc = check(args.name, args.data, deep=args.deep)
    except NotPrepared as exc:
        print(f"runner datasets check: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        counts = ", ".join(f"{k} {v}" for k, v in doc["counts"].items())
        print(f"{doc['dataset']}: complete (catalogue {doc.get('catalogue_version')}): {counts}")
    return 0
