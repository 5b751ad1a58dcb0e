"""The peer comparison's tables from one run's JSON: epjit-bench --baselines
records (epjit's op eager and graph, NCCL's grouped send/recv and the peer-write
ceilings, per dtype and routing) and deep_ep_paths.py's (DeepEP's Buffer and
epjit.deep_ep's). Markdown on stdout.

    python benchmarks/peers/table.py LOGDIR/epjit-*.json LOGDIR/deep-ep-paths.json

Bandwidth is per rank, two ways: every row a leg moves (local ones too), and
only the rows that cross to another rank; "of SM" is the crossing rows' rate
as a fraction of the SM-write ceiling epjit-bench measured in the same run.
"""
import json
import sys


def fmt(value, digits=1):
    return "–" if value is None else f"{value:.{digits}f}"


def load(paths):
    bench, paths_records, meta = [], [], {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if data.get("tool") == "epjit-bench":
            bench.append(data)
        else:
            paths_records += data["records"]
            meta = data.get("meta", {})
    return bench, paths_records, meta


def main():
    bench, records, meta = load(sys.argv[1:])
    ceiling = None
    for run in bench:
        ceilings = (run.get("baselines") or {}).get("ceilings")
        if ceilings:
            ceiling = ceilings["sm_writes_GBps"] if ceiling is None else min(ceiling, ceilings["sm_writes_GBps"])
    first = bench[0] if bench else {}
    print(f"revision {first.get('revision', '?')}, {first.get('device', meta.get('gpu', '?'))}, "
          f"world {first.get('world_size', meta.get('world', '?'))}, transport {first.get('transport', '?')}, "
          f"torch {meta.get('torch', '?')}; SM-write ceiling {fmt(ceiling)} GB/s per rank")
    print()
    layer = {(r["lib"], r.get("mode"), r.get("dtype"), r.get("routing"), r.get("tokens")): r for r in records}
    skipped = [r for r in records if "skipped" in r]
    for r in skipped:
        print(f"- {r['lib']}: not run ({r['skipped']})")
    if skipped:
        print()

    def leg(rec, name):
        return rec.get(f"{name}_us") if rec and rec.get("check") == "passed" else None

    def rate(rec, name, remote):
        us = leg(rec, name)
        if not us:
            return None
        rows = rec["rows_remote"] if remote else rec["rows_out"]
        return rows * rec["row_bytes"] / us / 1e3

    print("| dtype | routing | tokens | epjit eager disp / comb µs | epjit graph | NCCL | epjit.deep_ep | DeepEP normal "
          "| epjit disp GB/s all / crossing (of SM) | epjit comb | DeepEP disp (of SM) | DeepEP comb |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in sorted(bench, key=lambda r: (r["dispatch_dtype"], r["routing"])):
        dtype = "fp8" if "fp8" in run["dispatch_dtype"] else run["dispatch_dtype"]
        for p in run["points"]:
            n = p["tokens_per_rank"]
            ours = layer.get(("epjit", "normal", dtype, run["routing"], n))
            theirs = layer.get(("deepep", "normal", dtype, run["routing"], n))
            of_sm = lambda v: f" ({v:.0%})" if v is not None and ceiling else ""  # noqa: E731
            deepep_cross = rate(theirs, "dispatch", True)
            print(f"| {dtype} | {run['routing']} | {n} "
                  f"| {fmt(p.get('dispatch_us_max_rank'))} / {fmt(p.get('combine_us_max_rank'))} "
                  f"| {fmt(p.get('graph_dispatch_us_max_rank'))} / {fmt(p.get('graph_combine_us_max_rank'))} "
                  f"| {fmt(p.get('nccl_dispatch_us_max_rank'))} / {fmt(p.get('nccl_combine_us_max_rank'))} "
                  f"| {fmt(leg(ours, 'dispatch'))} / {fmt(leg(ours, 'combine'))} "
                  f"| {fmt(leg(theirs, 'dispatch'))} / {fmt(leg(theirs, 'combine'))} "
                  f"| {fmt(p.get('dispatch_algbw_GBps_per_rank'))} / {fmt(p.get('dispatch_nvlink_GBps_per_rank'))}"
                  f"{of_sm(p.get('dispatch_vs_sm_write_ceiling'))} "
                  f"| {fmt(p.get('combine_algbw_GBps_per_rank'))} / {fmt(p.get('combine_nvlink_GBps_per_rank'))}"
                  f"{of_sm(p.get('combine_vs_sm_write_ceiling'))} "
                  f"| {fmt(rate(theirs, 'dispatch', False))} / {fmt(deepep_cross)}"
                  f"{of_sm(deepep_cross / ceiling if deepep_cross and ceiling else None)} "
                  f"| {fmt(rate(theirs, 'combine', False))} / {fmt(rate(theirs, 'combine', True))} |")
    print()
    print("Low latency, dispatch + combine µs (dispatch / combine):")
    print()
    print("| dtype | routing | tokens | epjit.deep_ep | DeepEP low latency | check |")
    print("|---|---|---|---|---|---|")
    ll = sorted({k[2:] for k in layer if k[1] == "low_latency"})
    for dtype, routing, n in ll:
        cells, checks = [], []
        for lib in ("epjit", "deepep"):
            rec = layer.get((lib, "low_latency", dtype, routing, n))
            d, c = leg(rec, "dispatch"), leg(rec, "combine")
            cells.append(f"{fmt(d + c if d and c else None)} ({fmt(d)} / {fmt(c)})")
            if rec and rec.get("check") != "passed":
                checks.append(f"{lib}: {rec['check']}")
        print(f"| {dtype} | {routing} | {n} | {cells[0]} | {cells[1]} | {'; '.join(checks) or 'passed'} |")
    failed = [r for r in records if r.get("check") not in (None, "passed")]
    failed += [dict(lib="epjit-bench", check=p["identity_check"]) for run in bench for p in run["points"]
               if p.get("identity_check") != "passed"]
    if failed:
        print()
        for r in failed:
            print(f"- check failed: {r['lib']} {r.get('mode', '')} {r.get('dtype', '')} {r.get('routing', '')} "
                  f"{r.get('tokens', '')}: {r['check']}")


if __name__ == "__main__":
    main()
