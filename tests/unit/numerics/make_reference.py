#!/usr/bin/env python3
"""Reference tables for epjit's numerics tests, made by an independent
implementation: ml_dtypes for every format, and a float64 model (numpy) for the
MX and FP8-blockwise block rules of docs/NUMERICS.md.

Writes raw little-endian arrays into --out (one file each); the C++ test reads
them. Inputs are fixed-seed random values at many scales plus every tie,
neighbour, subnormal, max, just-above-max, +-0, +-Inf and NaN of each format.
"""
import argparse
import math
import os

import ml_dtypes as md
import numpy as np

FP8 = {
    "e4m3fn": md.float8_e4m3fn,
    "e4m3fnuz": md.float8_e4m3fnuz,
    "e5m2": md.float8_e5m2,
    "e5m2fnuz": md.float8_e5m2fnuz,
}
# MX element formats: (ml_dtypes type, emax, max finite); MXFP8 uses OCP fp8.
MX = {
    "e2m1": (md.float4_e2m1fn, 2, 6.0),
    "e4m3": (md.float8_e4m3fn, 8, 448.0),
    "e5m2": (md.float8_e5m2, 15, 57344.0),
}
FP4_NO_REFERENCE = 0xFF  # E2M1 has no NaN: NaN inputs are checked separately
SEED = 20261129
# 0.7 rounds float32 subnormals to E8M0 half up, like normals; 0.6 sent every
# subnormal above 2^-127 to 2^-126. numerics.h follows 0.7.
MIN_ML_DTYPES = (0, 7)


def require_ml_dtypes():
    have = tuple(int(p) for p in md.__version__.split(".")[:2])
    if have < MIN_ML_DTYPES:
        raise SystemExit(
            f"make_reference.py: ml_dtypes {md.__version__} is older than "
            f"{'.'.join(map(str, MIN_ML_DTYPES))}, whose E8M0 rounding the tests expect; "
            "run scripts/install-deps.sh (it upgrades the test venv)")


def write(out, name, array):
    np.ascontiguousarray(array).tofile(os.path.join(out, name))


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def neighbours(values):
    """Each value and the float32 just below and above it."""
    v = values.astype(np.float32)
    return np.concatenate([v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))])


def grid_points(dtype, code_count):
    """Every finite value of a format, every midpoint between neighbours (the
    ties), and the float32 neighbours of both, with both signs."""
    codes = np.arange(code_count, dtype=np.uint16 if code_count > 256 else np.uint8)
    values = codes.view(dtype).astype(np.float32)
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    mids = ((finite[:-1].astype(np.float64) + finite[1:].astype(np.float64)) / 2).astype(np.float32)
    top = finite[-1].astype(np.float64)
    ulp_top = top - finite[-2].astype(np.float64)
    with np.errstate(over="ignore"):  # bf16's top * 2 is past float32: Inf, also wanted
        above_max = np.array([top + ulp_top / 2, top + ulp_top, top * 2], dtype=np.float32)
    points = neighbours(np.concatenate([finite, mids, above_max]))
    return np.concatenate([points, -points])


def encode_inputs(rng):
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], dtype=np.float32)
    nan_payloads = np.array([0x7FA00001, 0xFFA00001, 0x7F800001, 0x7FFFFFFF, 0xFFC00000], dtype=np.uint32).view(np.float32)
    f32_edges = np.array([np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                          np.finfo(np.float32).smallest_subnormal], dtype=np.float32)
    parts = [specials, nan_payloads, f32_edges, -f32_edges]
    for dtype in FP8.values():
        parts.append(grid_points(dtype, 256))
    parts.append(grid_points(md.float4_e2m1fn, 16))
    parts.append(grid_points(md.bfloat16, 65536))
    # Powers of two across the whole float32 range (the E8M0 grid) and ties of it.
    pow2 = np.ldexp(np.float64(1.0), np.arange(-149, 128)).astype(np.float32)
    parts.append(neighbours(np.concatenate([pow2, pow2 * np.float32(1.5)])))
    # Random: uniform over all finite float32 bit patterns (every exponent).
    bits = rng.integers(0, 0xFF000000, size=400_000, dtype=np.uint64).astype(np.uint32)
    bits = bits & np.uint32(0x7FFFFFFF) | (bits & np.uint32(1)) << np.uint32(31)
    exp_field = (bits >> np.uint32(23)) & np.uint32(0xFF)
    parts.append(bits[exp_field != 0xFF].view(np.float32))
    # Random, log-uniform over the narrow formats' ranges and a margin.
    for lo, hi, count in [(-30, 20, 300_000), (-12, 9, 200_000), (-140, -110, 50_000)]:
        e = rng.uniform(lo, hi, size=count)
        s = rng.choice([-1.0, 1.0], size=count)
        parts.append((s * np.exp2(e)).astype(np.float32))
    # float32 subnormals.
    sub = rng.integers(1, 0x800000, size=50_000, dtype=np.uint32)
    parts.append(sub.view(np.float32))
    parts.append((sub | np.uint32(0x80000000)).view(np.float32))
    return np.concatenate(parts).astype(np.float32)


def clamp(x, limit):
    with np.errstate(invalid="ignore"):
        return np.clip(x, -limit, limit).astype(np.float32)


def write_encode_tables(out, x):
    write(out, "encode_inputs.f32", x)
    with np.errstate(invalid="ignore", over="ignore"):
        for name, dtype in FP8.items():
            write(out, f"encode_{name}.u8", x.astype(dtype).view(np.uint8))
            limit = float(md.finfo(dtype).max)
            write(out, f"encode_{name}_saturate.u8", clamp(x, limit).astype(dtype).view(np.uint8))
        fp4 = x.astype(md.float4_e2m1fn).view(np.uint8).copy()
        fp4[np.isnan(x)] = FP4_NO_REFERENCE
        write(out, "encode_e2m1.u8", fp4)
        write(out, "encode_e8m0.u8", x.astype(md.float8_e8m0fnu).view(np.uint8))
        write(out, "encode_bf16.u16", x.astype(md.bfloat16).view(np.uint16))


def write_decode_tables(out):
    for name, dtype in FP8.items():
        write(out, f"decode_{name}.f32", np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32))
    write(out, "decode_e2m1.f32", np.arange(16, dtype=np.uint8).view(md.float4_e2m1fn).astype(np.float32))
    write(out, "decode_e8m0.f32", np.arange(256, dtype=np.uint8).view(md.float8_e8m0fnu).astype(np.float32))
    write(out, "decode_bf16.f32", np.arange(65536, dtype=np.uint16).view(md.bfloat16).astype(np.float32))


def random_blocks(rng, count, width):
    """Blocks at many magnitudes, with odd lengths, zeros, subnormals, NaN, Inf."""
    blocks = np.zeros((count, width), dtype=np.float32)
    lengths = np.full(count, width, dtype=np.int32)
    for b in range(count):
        kind = b % 16
        if kind == 0:
            lengths[b] = rng.integers(1, width)  # a tail block
        scale_exp = rng.uniform(-130, 120)
        values = rng.standard_normal(width) * np.exp2(scale_exp)
        if kind == 1:
            values[:] = 0.0
        elif kind == 2:
            values = rng.integers(-0x7FFFFF, 0x7FFFFF, size=width).astype(np.float64) * 2.0**-149
        elif kind == 3:
            values[rng.integers(0, width)] = np.nan
        elif kind == 4:
            values[rng.integers(0, width)] = np.inf * rng.choice([-1, 1])
        elif kind == 5:
            values = rng.standard_normal(width) * 300.0  # around the fp8 max
        elif kind == 6:
            values[:] = -0.0
        blocks[b] = values.astype(np.float32)
        blocks[b, lengths[b]:] = 0.0
    return blocks, lengths


def floor_log2(v):
    return math.frexp(v)[1] - 1


def write_mx_tables(out, rng):
    blocks, lengths = random_blocks(rng, 20_000, 32)
    write(out, "mx_blocks.f32", blocks)
    write(out, "mx_lengths.i32", lengths)
    for name, (dtype, emax, limit) in MX.items():
        scales = np.zeros(len(blocks), dtype=np.uint8)
        codes = np.zeros((len(blocks), 32), dtype=np.uint8)  # one code per element, unpacked
        dequant = np.zeros((len(blocks), 32), dtype=np.float32)
        for b in range(len(blocks)):
            x = blocks[b, :lengths[b]].astype(np.float64)
            amax = np.max(np.abs(x))
            if not np.isfinite(amax):
                scales[b] = 0xFF
                dequant[b, :lengths[b]] = np.nan
                continue
            shared = 0 if amax == 0 else min(max(floor_log2(amax) - emax, -127), 127)
            scales[b] = shared + 127
            q = (x / 2.0**shared).astype(np.float32)
            c = np.clip(q, -limit, limit).astype(dtype)
            codes[b, :lengths[b]] = c.view(np.uint8)
            dequant[b, :lengths[b]] = (c.astype(np.float64) * 2.0**shared).astype(np.float32)
        write(out, f"mx_{name}_scales.u8", scales)
        write(out, f"mx_{name}_codes.u8", codes)
        write(out, f"mx_{name}_dequant.f32", dequant)


def write_blockwise_tables(out, rng):
    blocks, lengths = random_blocks(rng, 6_000, 128)
    write(out, "bw_blocks.f32", blocks)
    write(out, "bw_lengths.i32", lengths)
    with np.errstate(invalid="ignore", over="ignore"):
        for name, dtype in FP8.items():
            limit = float(md.finfo(dtype).max)
            scales = np.zeros(len(blocks), dtype=np.float32)
            codes = np.zeros((len(blocks), 128), dtype=np.uint8)
            dequant = np.zeros((len(blocks), 128), dtype=np.float32)
            for b in range(len(blocks)):
                x = blocks[b, :lengths[b]].astype(np.float64)
                amax = np.max(np.abs(x))
                scale = np.float32(amax / limit) if amax > limit else np.float32(1.0)
                scales[b] = scale
                q = (x / np.float64(scale)).astype(np.float32)
                c = clamp(q, limit).astype(dtype)
                codes[b, :lengths[b]] = c.view(np.uint8)
                dequant[b, :lengths[b]] = (c.astype(np.float64) * np.float64(scale)).astype(np.float32)
            write(out, f"bw_{name}_scales.f32", scales)
            write(out, f"bw_{name}_codes.u8", codes)
            write(out, f"bw_{name}_dequant.f32", dequant)


def write_deepep_tables(out, rng):
    """DeepEP's per-128 cast (csrc/kernels/legacy/utils.cuh, internode_ll.cu) modelled in
    numpy float32: amax = fmax over |x| from 1e-4; scale_inv = amax * f32(1/448) and
    x * (448 / amax), or, rounded, 2^e with e = ceil(log2(amax * f32(1/448))) from the
    bits and x * 2^-e; codes by ml_dtypes after saturating to +-448. Blocks whose
    amax is infinite (DeepEP leaves them undefined) get length 0."""
    blocks, lengths = random_blocks(rng, 4_000, 128)
    inverse = np.float32(1.0) / np.float32(448.0)
    # Blocks whose elements land on other codes when divided by scale_inv instead
    # of multiplied by 448 / amax (the rounding of the two differs at fp8 ties):
    # a model that divides fails on them.
    for b in range(0, 400, 2):
        amax = np.float32(rng.uniform(1.0, 1000.0))
        multiplier = np.float32(np.float32(448.0) / amax)
        divisor = np.float32(amax * inverse)
        # Candidates: the float32 neighbours of each e4m3 tie (midpoint of two
        # codes) brought back by the multiplier, where the two roundings part.
        codes_f = np.arange(0, 0x7F, dtype=np.uint8).view(md.float8_e4m3fn).astype(np.float32)
        ties = ((codes_f[:-1].astype(np.float64) + codes_f[1:]) / 2).astype(np.float32)
        centre = (ties / multiplier).astype(np.float32).view(np.int32)
        x = (centre[:, None] + np.arange(-8, 9, dtype=np.int32)[None, :]).reshape(-1).view(np.float32)
        x = x[np.isfinite(x) & (np.abs(x) < amax)]
        x = np.concatenate([x, -x])
        with np.errstate(over="ignore"):
            by_multiply = clamp((x * multiplier).astype(np.float32), 448.0).astype(md.float8_e4m3fn).view(np.uint8)
            by_divide = clamp((x / divisor).astype(np.float32), 448.0).astype(md.float8_e4m3fn).view(np.uint8)
        differ = x[by_multiply != by_divide][:127]
        blocks[b, :] = 0.0
        blocks[b, 0] = amax
        blocks[b, 1:1 + len(differ)] = differ
        lengths[b] = 128
    for b in range(len(blocks)):
        if not np.isfinite(np.fmax.reduce(np.abs(blocks[b, :lengths[b]]))):
            lengths[b] = 0
    write(out, "deepep_blocks.f32", blocks)
    write(out, "deepep_lengths.i32", lengths)
    for rounded in (False, True):
        scales = np.zeros(len(blocks), dtype=np.float32)
        codes = np.zeros((len(blocks), 128), dtype=np.uint8)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            for b in range(len(blocks)):
                x = blocks[b, :lengths[b]]
                amax = np.float32(np.fmax.reduce(np.abs(x), initial=np.float32(1e-4)))
                ratio = np.float32(amax * inverse)
                if rounded:
                    bits = int(ratio.view(np.uint32))
                    e = ((bits >> 23) & 0xFF) - 127 + (1 if bits & 0x7FFFFF else 0)
                    scale_inv, multiplier = np.float32(2.0 ** e), np.float32(2.0 ** -e)
                else:
                    scale_inv, multiplier = ratio, np.float32(np.float32(448.0) / amax)
                scales[b] = scale_inv
                q = (x * multiplier).astype(np.float32)
                codes[b, :lengths[b]] = clamp(q, 448.0).astype(md.float8_e4m3fn).view(np.uint8)
        name = "deepep_pow2" if rounded else "deepep_f32"
        write(out, f"{name}_scales.f32", scales)
        write(out, f"{name}_codes.u8", codes)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    require_ml_dtypes()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    x = encode_inputs(rng)
    write_encode_tables(args.out, x)
    write_decode_tables(args.out)
    write_mx_tables(args.out, rng)
    write_blockwise_tables(args.out, rng)
    write_deepep_tables(args.out, rng)
    with open(os.path.join(args.out, "stamp"), "w") as f:
        f.write(f"{len(x)} encode inputs, ml_dtypes {md.__version__}, numpy {np.__version__}\n")


if __name__ == "__main__":
    main()
