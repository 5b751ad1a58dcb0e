// sm100 (sm_100a) PTX: FP4 through the hardware conversions Hopper lacks
// (cvt.rn.satfinite.e2m1x2.f32, four per eight elements, and
// cvt.rn.f16x2.e2m1x2), OCP fp8 through cvt.rn.satfinite as on sm90, and the
// EP kernels with 16-byte loads in flight in the combines, system-scope
// atomics where ranks meet, and no local memory (no spill, no stack frame).
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=7168 --target sm100 --emit asm | FileCheck %s --check-prefix=FP4
// RUN: epjit-compile --template dequantize_mxfp4 --set hidden=7168 --target sm100 --emit asm | FileCheck %s --check-prefix=DEQ
// RUN: epjit-compile --template quantize_fp8_blockwise --set hidden=7168 --target sm100 --emit asm | FileCheck %s --check-prefix=FP8
// The EP kernels as sm100's schedule builds them: blocks of at most 8 warps
// (in 16-warp blocks, 128 registers a thread, ptxas spills the combines).
// RUN: epjit-compile --template ep_dispatch_combine %{ep} --set warps_per_block=8 --target sm100 --emit asm > %t.s
// RUN: epjit-compile --template ep_dispatch_combine %{ep_gather} --set warps_per_block=8 --target sm100 --emit asm > %t.gather.s
// RUN: FileCheck %s --check-prefix=EP < %t.s
// RUN: FileCheck %s --check-prefix=EP-GATHER < %t.gather.s
// RUN: FileCheck %s --check-prefix=NO-LOCAL < %t.s
// RUN: FileCheck %s --check-prefix=NO-LOCAL < %t.gather.s
// RUN: %python %S/Inputs/loads_in_flight.py --kernel ep_combine_scatter --load "ld(\.global)?(\.nc)?\.v4" --wait "add\.(rn\.)?f32|fma\.rn\.f32" --min 8 < %t.s
// RUN: %python %S/Inputs/loads_in_flight.py --kernel ep_combine_gather --load "ld(\.global)?(\.nc)?\.v4" --wait "add\.(rn\.)?f32|fma\.rn\.f32" --min 8 < %t.gather.s
// RUN: %python %S/Inputs/loads_in_flight.py --kernel ep_dispatch --load "ld(\.global)?(\.nc)?\.v4" --wait "st(\.global)?\.v4" --min 8 < %t.s

// FP4: .target sm_100a
// FP4: .entry quantize_mxfp4
// FP4-COUNT-4: cvt.rn.satfinite.e2m1x2.f32
// FP4-NOT: div.rn.f32
// FP4: ; resources quantize_mxfp4: registers {{[0-9]+}} spill 0 stack 0 code

// DEQ: .target sm_100a
// DEQ-COUNT-4: cvt.rn.f16x2.e2m1x2
// DEQ: ; resources dequantize_mxfp4: registers {{[0-9]+}} spill 0 stack 0 code

// FP8: cvt.rn.satfinite.e4m3x2.f32
// FP8: ; resources quantize_fp8_blockwise: registers {{[0-9]+}} spill 0 stack 0 code

// EP-DAG: st.release.sys.b32
// EP-DAG: ld.acquire.sys.b32
// EP-DAG: cvt.rn.satfinite.e4m3x2.f32
// EP-DAG: ; resources ep_dispatch: registers {{[0-9]+}} spill 0 stack 0
// EP-DAG: ; resources ep_combine_scatter: registers {{[0-9]+}} spill 0 stack 0
// EP-GATHER-DAG: ; resources ep_combine_gather: registers {{[0-9]+}} spill 0 stack 0
// EP-GATHER-DAG: ; resources ep_std_moe_pack: registers {{[0-9]+}} spill 0 stack 0
// NO-LOCAL-NOT: .local
// NO-LOCAL-NOT: spill {{[1-9]}}
// NO-LOCAL-NOT: stack {{[1-9]}}
