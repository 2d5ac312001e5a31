"""The report's scores of the published MLPerf v0.5 and v0.6 result trees, beside the
published ones.

    python benchmarks/mlperf_scores.py TREE [TREE ...] [--published CSV] [--all]

TREE is a checkout of mlcommons/training_results_v0.5 or _v0.6 (a folder), or the
bare git directory of one (``/work/.mirror/mlcommons+training_results_v0.5/repo``
from the search tool's fetch): then its results/ and systems/ files are unpacked
into a temporary folder first, and result files that the git directory does not
hold (a fetched snapshot keeps no file of 4 MiB or more) are counted per system
x benchmark, so that a row with too few runs says why.

Runs the report's own reading and scoring (lab.results.logreader.read_runs, lab.report.analysis.analyse)
over each tree, then prints one row per submitter x system x benchmark: runs and
successes, compliance, the report's score in minutes, the published score where
``benchmarks/mlperf_published.csv`` has it, and a status: "equal" (the report's
score rounded to 0.01 minute equals a table's value; a value published rounded
coarser is met within half its last unit), "differs", "no published value on
file", or why a row cannot be compared. GPU systems only unless --all. The last line sums it up.
It also prints how long collect + analyse took for each tree (wall and CPU).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.core.mlperf import default_rules
from lab.report.analysis import analyse
from lab.results.logreader import read_runs

PUBLISHED = Path(__file__).resolve().parent / "mlperf_published.csv"
TOLERANCE = 0.005  # minutes: the published tables print two decimals
GPU_WORDS = ("V100", "T4", "A100", "P100", "H100")


def unpack(gitdir: Path, dest: Path) -> Counter:
    """results/ and systems/ files of HEAD into dest; returns missing blobs per folder."""
    ls = subprocess.run(
        ["git", "--git-dir", str(gitdir), "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True
    ).stdout
    wanted = []
    for entry in ls.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        _, kind, sha = meta.split()
        parts = path.decode().split("/")
        if kind == b"blob" and ("results" in parts or "systems" in parts):
            wanted.append((sha.decode(), path.decode()))
    missing = Counter()
    proc = subprocess.Popen(
        ["git", "--git-dir", str(gitdir), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    for sha, path in wanted:
        proc.stdin.write(sha.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            missing[str(Path(path).parent)] += 1
            continue
        data = proc.stdout.read(int(header[2]))
        proc.stdout.read(1)
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    proc.stdin.close()
    proc.wait()
    return missing


def load_published(path: Path) -> dict:
    out = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(line for line in fh if not line.startswith("#")):
            key = (row["round"], row["submitter"].lower(), row["system"], row["benchmark"])
            out[key] = (float(row["minutes"]), float(row["tolerance_minutes"]), row["source"])
    return out


def round_of(tree: Path, systems: list[dict]) -> str:
    rounds = {s["round"] for s in systems if s["round"] in ("v0.5", "v0.6")}
    return rounds.pop() if len(rounds) == 1 else tree.name


def is_gpu(s: dict) -> bool:
    name = f"{s['device']} {s.get('accelerator') or ''}"
    return any(w in name for w in GPU_WORDS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--published", type=Path, default=PUBLISHED)
    ap.add_argument("--all", action="store_true", help="also the CPU and TPU systems")
    args = ap.parse_args(argv)
    published = load_published(args.published)
    rules = default_rules()
    status = Counter()
    differs, uncompared = [], []
    with tempfile.TemporaryDirectory(prefix="mlperf-trees-") as tmp:
        for tree in args.trees:
            missing = Counter()
            if (tree / "HEAD").is_file() and (tree / "objects").is_dir():
                root = Path(tmp) / tree.parent.name.split("+")[-1]
                missing = unpack(tree, root)
            else:
                root = tree
            t0, c0 = time.perf_counter(), time.process_time()
            coll = read_runs([root], rules)
            an = analyse(coll.runs, rules)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rnd = round_of(tree, an.systems)
            print(
                f"\n== {tree} ({rnd}): {len(coll.runs)} runs, {len(coll.skipped)} skipped, "
                f"{len(an.systems)} records; collect + analyse {wall:.1f} s wall, {cpu:.1f} s CPU"
            )
            print(
                f"{'submitter':10} {'system':34} {'benchmark':11} {'device':12} {'GPUs':>5} "
                f"{'runs':>4} {'ok':>3} {'compliance':14} {'report':>9} {'published':>9}  status"
            )
            absent = defaultdict(int)
            for folder, n in missing.items():
                parts = Path(folder).parts
                if "results" in parts:
                    i = parts.index("results")
                    if len(parts) > i + 2:
                        absent[(parts[i + 1], rules.benchmark(parts[i + 2]) or parts[i + 2])] += n
            seen = set()
            for s in an.systems:
                if not (args.all or is_gpu(s)):
                    continue
                key = (
                    rnd,
                    (s["submitter"] or "").lower(),
                    s["system_key"].split("/")[-1] if s["system_key"] else s["system"],
                    s["benchmark"],
                )
                seen.add((key[2], s["benchmark"]))
                pub = published.get(key)
                gone = absent.get((key[2], s["benchmark"]), 0)
                mine = s["score_minutes"]
                if pub is None:
                    st = "no published value on file"
                elif mine is None:
                    st = "no report score" + (f" ({gone} result file(s) absent from the snapshot)" if gone else "")
                elif abs((round(mine, 2) if pub[1] <= TOLERANCE else mine) - pub[0]) <= pub[1] + 1e-9:
                    st = "equal"
                else:
                    st = f"differs by {mine - pub[0]:+.2f}"
                    if gone:
                        st += f" ({gone} result file(s) absent from the snapshot)"
                    differs.append(f"{rnd} {s['submitter']} {s['system']} {s['benchmark']}: {st}")
                if s["too_few_runs"] and gone and st != "equal":
                    st += f"; {gone} result file(s) absent from the snapshot"
                status[st.split(" (")[0].split(";")[0] if not st.startswith("differs") else "differs"] += 1
                print(
                    f"{(s['submitter'] or '-')[:10]:10} {s['system'][:34]:34} {s['benchmark'][:11]:11} "
                    f"{s['device'][:12]:12} {str(s['gpus']):>5} {s['runs']:>4} {s['successes']:>3} "
                    f"{s['compliance'][:14]:14} {('%.2f' % mine) if mine is not None else '-':>9} "
                    f"{('%.2f' % pub[0]) if pub else '-':>9}  {st}"
                )
            for (system, bench), n in sorted(absent.items()):
                if (system, bench) not in seen and (
                    args.all or any(w.lower() in system.lower() for w in ("dgx", "v100", "gpu"))
                ):
                    uncompared.append(f"{rnd} {system} {bench}")
                    status["all result files absent from the snapshot"] += 1
                    print(
                        f"{'':10} {system[:34]:34} {bench[:11]:11} {'':12} {'':>5} {0:>4} {0:>3} "
                        f"{'':14} {'-':>9} {'-':>9}  all {n} result file(s) absent from the snapshot"
                    )
    rows = sum(status.values())
    parts = [f"{n} {k}" for k, n in sorted(status.items(), key=lambda kv: -kv[1])]
    print(f"\nSUMMARY: {rows} {'' if args.all else 'GPU '}system x benchmark rows: " + ", ".join(parts) + ".")
    if differs:
        print("Differ: " + "; ".join(differs))
    if uncompared:
        print("Not in the snapshot at all: " + "; ".join(uncompared))
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
