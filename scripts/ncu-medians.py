#!/usr/bin/env python3
"""Per-kernel medians of ncu's gpu__time_duration from the AB=1 logs of
.gpu/run.sh (ncu-cCASE-SIDE-PASS.txt: one case per AB_FLAGS set, sides before
and after): one line per log, per token count of the run, the median duration
of each EP kernel in µs.

    scripts/ncu-medians.py LOGDIR [--tokens 1,8,128,8192]

The bench launches the same kernels the same number of times at every token
count, so the launches split evenly over the counts, in order.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir")
    parser.add_argument("--tokens", default="1,8,128,8192")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    paths = sorted(glob.glob(os.path.join(args.logdir, "ncu-*.txt")))
    if not paths:
        sys.exit(f"no ncu-*.txt in {args.logdir}")
    for path in paths:
        launches = durations(path)
        per_count = len(launches) // len(tokens)
        if per_count == 0 or len(launches) % len(tokens):
            print(f"{os.path.basename(path)}: {len(launches)} launches do not split over {len(tokens)} token counts")
            continue
        cells = []
        for i, count in enumerate(tokens):
            part = launches[i * per_count:(i + 1) * per_count]
            kernels = sorted({k for k, _ in part})
            cells.append(f"{count}: " + ", ".join(
                f"{k} {statistics.median(v for kk, v in part if kk == k):.2f}" for k in kernels))
        print(f"{os.path.basename(path)}  " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
