#!/usr/bin/env python3
"""Markdown tables from epjit-bench JSON records (--baselines, --graph), and
issue 13's targets checked against them.

    scripts/bench-table.py RECORD.json [...] [--before RECORD.json ...]

For each record: a line naming its configuration, then per token count the
eager and graph times, NCCL moving the same bytes, the speedups and the
NVLink rates against the SM-write ceiling. With --before, each record is
paired with the before-record of the same configuration (world, shape,
dtypes, combine mode, quant, std-MoE) and every point slower than before is
listed. A record of issue 13's main configuration (EP2, hidden 7168, top-8,
256 experts, bf16 dispatch, gather, no quant) is checked against its targets.
Exit status 0 whatever the verdicts: this reports, it does not gate.
"""
import argparse
import json
import sys


def configuration(record):
    shape = record["shape"]
    return (record["world_size"], shape["hidden"], shape["topk"], shape["experts"], record["dispatch_dtype"],
            record["combine_dtype"], record.get("combine_mode", "gather"), record.get("quant", "none"),
            bool(record.get("std_moe", False)))


def describe(record):
    world, hidden, topk, experts, dispatch, combine, mode, quant, std_moe = configuration(record)
    parts = [f"EP{world}", f"hidden {hidden}", f"top-{topk}", f"{experts} experts", f"{dispatch} dispatch",
             f"{combine} {mode} combine"]
    if quant != "none":
        parts.append(f"quant {quant}")
    if std_moe:
        parts.append("std-MoE")
    return ", ".join(parts) + f" (revision {record['revision']}, {record['device']})"


def number(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(value):
    return "-" if value is None else f"{value:.2f}×"


def percent(value):
    return "-" if value is None else f"{100 * value:.0f}%"


ELEMENT_BYTES = {"bf16": 2, "f32": 4, "fp8_e4m3fn": 1, "fp8_e4m3fnuz": 1, "fp8": 1, "fp4_e2m1": 0.5, "fp4": 0.5}


def combine_vs_sm(record, p):
    """The combine's NVLink rate over the SM-write ceiling; derived from the
    dispatch's for records older than the bench's own field (the same rows
    cross back, in the combine's element type)."""
    if "combine_vs_sm_write_ceiling" in p:
        return p["combine_vs_sm_write_ceiling"]
    share, combine_us = p.get("dispatch_vs_sm_write_ceiling"), p.get("combine_us_max_rank")
    dispatch_bytes = ELEMENT_BYTES.get(record["dispatch_dtype"])
    combine_bytes = ELEMENT_BYTES.get(record["combine_dtype"])
    if share is None or not combine_us or not dispatch_bytes or not combine_bytes:
        return None
    return share * p["dispatch_us_max_rank"] / combine_us * combine_bytes / dispatch_bytes


def table(record):
    lines = [
        "| tokens | dispatch µs | combine µs | graph disp / comb µs | 1-graph round trip µs | NCCL disp / comb µs "
        "| disp vs NCCL | comb vs NCCL | disp / comb NVLink vs SM writes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in record["points"]:
        if "dispatch_us_max_rank" not in p:
            continue
        lines.append(
            f"| {p['tokens_per_rank']} | {number(p['dispatch_us_max_rank'])} | {number(p['combine_us_max_rank'])} "
            f"| {number(p.get('graph_dispatch_us_max_rank'))} / {number(p.get('graph_combine_us_max_rank'))} "
            f"| {number(p.get('one_graph_round_trip_us_max_rank'))} "
            f"| {number(p.get('nccl_dispatch_us_max_rank'))} / {number(p.get('nccl_combine_us_max_rank'))} "
            f"| {ratio(p.get('dispatch_speedup_vs_nccl'))} | {ratio(p.get('combine_speedup_vs_nccl'))} "
            f"| {percent(p.get('dispatch_vs_sm_write_ceiling'))} / {percent(combine_vs_sm(record, p))} |")
    return "\n".join(lines)


def point_at(record, tokens):
    for p in record["points"]:
        if p["tokens_per_rank"] == tokens and "dispatch_us_max_rank" in p:
            return p
    return None


def is_main_configuration(record):
    return configuration(record) == (2, 7168, 8, 256, "bf16", "bf16", "gather", "none", False)


def verdict(name, value, target, met):
    shown = "not measured" if value is None else value
    return f"- {name}: {shown} (target {target}): {'met' if met else 'MISSED'}"


def targets(record):
    """Issue 13's targets for its main configuration, one line each."""
    lines = []
    one, small, mid, large = (point_at(record, t) for t in (1, 128, 4096, 8192))

    def get(p, key):
        return None if p is None else p.get(key)

    for leg in ("dispatch", "combine"):
        us = get(one, f"{leg}_us_max_rank")
        lines.append(verdict(f"1 token, {leg}", number(us) + " µs" if us else None, "≤ 10 µs",
                             us is not None and us <= 10))
    together = None if small is None else small["dispatch_us_max_rank"] + small["combine_us_max_rank"]
    lines.append(verdict("128 tokens, dispatch + combine", number(together) + " µs" if together else None,
                         "≤ 25 µs", together is not None and together <= 25))
    for leg, bound, speedup in (("dispatch", 175, 1.25), ("combine", 195, 1.15)):
        us, vs = get(mid, f"{leg}_us_max_rank"), get(mid, f"{leg}_speedup_vs_nccl")
        shown = None if us is None else f"{us:.1f} µs, {ratio(vs)} NCCL"
        lines.append(verdict(f"4096 tokens, {leg}", shown, f"≤ {bound} µs and ≥ {speedup}× NCCL",
                             us is not None and vs is not None and us <= bound and vs >= speedup))
    for leg in ("dispatch", "combine"):
        share = None if large is None else (large.get("dispatch_vs_sm_write_ceiling") if leg == "dispatch"
                                            else combine_vs_sm(record, large))
        lines.append(verdict(f"8192 tokens, {leg} NVLink rate", percent(share) if share else None,
                             "≥ 90% of the SM-write ceiling", share is not None and share >= 0.9))
    return "\n".join(lines)


def slower_than_before(record, before):
    """Points (eager or graph, either leg) slower than the before-record's by more than 2%."""
    slower = []
    for p in record["points"]:
        q = point_at(before, p["tokens_per_rank"])
        if q is None or "dispatch_us_max_rank" not in p:
            continue
        for key in ("dispatch_us_max_rank", "combine_us_max_rank", "graph_dispatch_us_max_rank",
                    "graph_combine_us_max_rank"):
            if key in p and key in q and p[key] > 1.02 * q[key]:
                slower.append(f"{p['tokens_per_rank']} tokens, {key.replace('_max_rank', '')}: "
                              f"{q[key]:.1f} → {p[key]:.1f}")
    return slower


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", nargs="+")
    parser.add_argument("--before", nargs="*", default=[])
    args = parser.parse_args()
    befores = {}
    for path in args.before:
        record = json.load(open(path))
        befores[configuration(record)] = (path, record)
    for path in args.records:
        record = json.load(open(path))
        print(f"**{describe(record)}** ({path})\n")
        floor = (record.get("baselines") or {}).get("launch_floor_us")
        if floor:
            print(f"Launch floor in the same run (an empty kernel on the EP kernels' launch path, timed like a leg): "
                  f"{floor:.1f} µs.\n")
        print(table(record) + "\n")
        if is_main_configuration(record):
            print("Issue 13's targets:\n")
            print(targets(record) + "\n")
        before = befores.get(configuration(record))
        if before:
            slower = slower_than_before(record, before[1])
            print(f"Against {before[0]} (revision {before[1]['revision']}): "
                  + ("no point slower by more than 2%." if not slower else "slower: " + "; ".join(slower) + "."))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
