#!/usr/bin/env python3
"""Plots epjit-bench JSON records (with --baselines): per-rank algorithm
bandwidth and latency against tokens, for dispatch and combine, with NCCL
moving the same bytes and the measured peer-write ceilings.

    scripts/plot-bench.py OUT.png RECORD.json [RECORD.json ...]

Needs matplotlib (pip install matplotlib); not part of make test.
"""
import json
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot-bench.py needs matplotlib: pip install matplotlib")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, paths = sys.argv[1], sys.argv[2:]
    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for path in paths:
        record = json.load(open(path))
        label = f"{record['dispatch_dtype']} dispatch / {record['combine_dtype']} {record.get('combine_mode', 'gather')} combine"
        points = [p for p in record["points"] if "dispatch_us_max_rank" in p]
        tokens = [p["tokens_per_rank"] for p in points]
        bw_ax.plot(tokens, [p["dispatch_algbw_GBps_per_rank"] for p in points], "o-", label=f"epjit dispatch ({label})")
        bw_ax.plot(tokens, [p["combine_algbw_GBps_per_rank"] for p in points], "s-", label=f"epjit combine ({label})")
        lat_ax.plot(tokens, [p["dispatch_us_max_rank"] for p in points], "o-", label=f"epjit dispatch ({label})")
        lat_ax.plot(tokens, [p["combine_us_max_rank"] for p in points], "s-", label=f"epjit combine ({label})")
        if "nccl_dispatch_us_max_rank" in points[0]:
            nccl_bw = [p["dispatch_algbw_GBps_per_rank"] / p["dispatch_speedup_vs_nccl"] for p in points]
            bw_ax.plot(tokens, nccl_bw, "x--", label=f"NCCL, dispatch bytes ({label})")
            lat_ax.plot(tokens, [p["nccl_dispatch_us_max_rank"] for p in points], "x--",
                        label=f"NCCL, dispatch bytes ({label})")
        ceilings = record.get("baselines", {}).get("ceilings")
    if ceilings:
        bw_ax.axhline(ceilings["copy_engine_GBps"], color="gray", linestyle=":", label="peer write ceiling (copy engine)")
        bw_ax.axhline(ceilings["sm_writes_GBps"], color="black", linestyle=":", label="peer write ceiling (SM)")
    first = json.load(open(paths[0]))
    title = (f"epjit {first['revision']} on {first['device']}, {first['target']}, EP{first['world_size']}, "
             f"hidden {first['shape']['hidden']}, top-{first['shape']['topk']}, {first['shape']['experts']} experts")
    for ax, ylabel in ((bw_ax, "per-rank algorithm bandwidth (GB/s, received bytes incl. local)"),
                       (lat_ax, "latency (µs, slowest rank)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per rank")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    lat_ax.set_yscale("log")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
