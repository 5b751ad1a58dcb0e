#!/usr/bin/env python3
"""Per-kernel medians of ncu's gpu__time_duration from the ab check's logs of
.gpu/run ab (ncu-cCASE-SIDE-PASS.txt: one case per AB_FLAGS set, sides before
and after): one line per log, per token count of the run, the median duration
of each EP kernel in µs.

    scripts/ncu-medians.py LOGDIR [--tokens 1,8,128,8192] [--table]

The bench launches the same kernels the same number of times at every token
count, so the launches split evenly over the counts, in order.

--table prints, per case, a markdown table for docs/PERFORMANCE.md instead: a
row per kernel, a column per token count, each cell the before side's
medians (one per pass, "/" between) -> the after side's.
"""
import argparse
import glob
import os
import re
import statistics
import sys


def durations(path):
    """(kernel, µs) for every profiled launch, in order."""
    launches, kernel = [], None
    for line in open(path):
        named = re.match(r"^  (ep_\w+)", line)
        if named:
            kernel = named.group(1)
        timed = re.search(r"gpu__time_duration.sum\s+(\w+)\s+([\d.,]+)", line)
        if timed and kernel:
            value = float(timed.group(2).replace(",", ""))
            scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(timed.group(1), 1.0)
            launches.append((kernel, value * scale))
    return launches


def medians_by_count(path, tokens):
    """{token count: {kernel: median µs}} of one log, or None when its launches
    do not split evenly over the counts."""
    launches = durations(path)
    per_count = len(launches) // len(tokens)
    if per_count == 0 or len(launches) % len(tokens):
        return None
    result = {}
    for i, count in enumerate(tokens):
        part = launches[i * per_count:(i + 1) * per_count]
        result[count] = {k: statistics.median(v for kk, v in part if kk == k) for k in sorted({k for k, _ in part})}
    return result


def print_tables(paths, tokens):
    """One markdown table per case of the ab check's logs (ncu-cCASE-SIDE-PASS.txt)."""
    logs = {}
    for path in paths:
        named = re.match(r"ncu-c(\d+)-(before|after)-(\d+)\.txt$", os.path.basename(path))
        if not named:
            continue
        table = medians_by_count(path, tokens)
        if table is None:
            sys.exit(f"{os.path.basename(path)}: its launches do not split over {len(tokens)} token counts")
        case, side, run = int(named.group(1)), named.group(2), int(named.group(3))
        logs.setdefault(case, {}).setdefault(side, {})[run] = table
    if not logs:
        sys.exit("no ncu-cCASE-SIDE-PASS.txt logs (.gpu/run ab writes them)")
    for case in sorted(logs):
        sides = logs[case]
        kernels = sorted({k for side in sides.values() for table in side.values() for per in table.values() for k in per})
        print(f"case {case}:\n")
        print("| kernel | " + " | ".join(f"{t} token{'s' if t != 1 else ''}" for t in tokens) + " |")
        print("|---|" + "---|" * len(tokens))
        for kernel in kernels:
            cells = []
            for count in tokens:
                def passes(side):
                    values = [sides.get(side, {})[run][count].get(kernel) for run in sorted(sides.get(side, {}))]
                    return " / ".join("-" if v is None else f"{v:.2f}" for v in values) or "-"
                cells.append(f"{passes('before')} → {passes('after')}")
            print(f"| `{kernel}` | " + " | ".join(cells) + " |")
        print()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir")
    parser.add_argument("--tokens", default="1,8,128,8192")
    parser.add_argument("--table", action="store_true", help="markdown tables, before -> after, per case")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    paths = sorted(glob.glob(os.path.join(args.logdir, "ncu-*.txt")))
    if not paths:
        sys.exit(f"no ncu-*.txt in {args.logdir}")
    if args.table:
        print_tables(paths, tokens)
        return 0
    for path in paths:
        table = medians_by_count(path, tokens)
        if table is None:
            print(f"{os.path.basename(path)}: {len(durations(path))} launches do not split over {len(tokens)} token counts")
            continue
        cells = [f"{count}: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()) for count, per in table.items()]
        print(f"{os.path.basename(path)}  " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
