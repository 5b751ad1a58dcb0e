// epjit-compile: listing, dumps, and one clear line for each kind of bad input.
// RUN: epjit-compile --template list | FileCheck %s --check-prefix=LIST
// RUN: epjit-compile --list-targets | FileCheck %s --check-prefix=TARGETS
// TARGETS: gfx942: vendor amd, arch gfx942, wave 64, fp8 e4m3fnuz, fp4 none, numerics of gfx942
// TARGETS: sm90: vendor nvidia, arch sm_90, wave 32, fp8 e4m3fn, fp4 software, numerics of sm90
// TARGETS-NEXT: sm100: vendor nvidia, arch sm_100a, wave 32, fp8 e4m3fn, fp4 hardware, numerics of sm100
// TARGETS: host-sm100: vendor cpu, arch native, wave 32, fp8 e4m3fn, fp4 software, numerics of sm100
// RUN: rm -rf %t && epjit-compile --template quantize_fp8_blockwise --set hidden=256 --target gfx950 --emit hip --dump-stages %t -o %t.hip && ls %t | FileCheck %s --check-prefix=DUMP
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=64 --target gfx950 --emit mlir | FileCheck %s --check-prefix=MLIR
// RUN: epjit-compile --input %epjit_src/templates/quantize_fp8_direct.mlir --set hidden=64 --target host --emit mlir --stop-after-stage=specialize | FileCheck %s --check-prefix=INPUT
// RUN: not epjit-compile --template quantize_fp9 --set hidden=64 --target gfx950 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not epjit-compile --template quantize_fp8_direct --target gfx950 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not epjit-compile --template quantize_fp8_direct --set hidden=lots --target gfx950 2>&1 | FileCheck %s --check-prefix=ILLTYPED
// RUN: not epjit-compile --template quantize_mxfp4 --set hidden=7 --target gfx950 2>&1 | FileCheck %s --check-prefix=CONSTRAINT
// RUN: not epjit-compile --template quantize_fp8_direct --set hidden=64 --target gfx90a 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not epjit-compile --template quantize_fp8_direct --set hidden=64 --target gfx950 --emit elf 2>&1 | FileCheck %s --check-prefix=EMIT
// RUN: not epjit-compile --template quantize_fp8_direct --input x.mlir --target gfx950 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not epjit-compile --template quantize_fp8_direct --set hidden=64 2>&1 | FileCheck %s --check-prefix=NOTARGET

// LIST: dequantize_fp8_blockwise
// LIST: {{^}}ep_dispatch_combine
// LIST: kernel @ep_std_moe_pack (warps_per_block 4) when(@std_moe)
// LIST: kernel @ep_std_moe_unpack (warps_per_block 4) when(@std_moe and @gpu_per_node lt @world)
// LIST: kernel @ep_combine_scatter (warps_per_block 4) when(@combine_mode eq "scatter" and @low_latency eq 0)
// LIST: kernel @ep_combine_low_latency (warps_per_block 4) when(@low_latency)
// LIST: kernel @ep_internode_sum (warps_per_block 4) when(@gpu_per_node lt @world)
// LIST: {{^}}quantize_mxfp4
// LIST-NEXT: hidden : index (min 2, multiple_of 2)
// LIST-NEXT: kernel @quantize_mxfp4 (warps_per_block 4)
// DUMP: 0-template.mlir
// DUMP-NEXT: 1-link.mlir
// DUMP-NEXT: 2-specialize.mlir
// DUMP-NEXT: 3-check-target.mlir
// DUMP-NEXT: 4-lower-numerics.mlir
// DUMP-NEXT: 5-lower-warp-ops.mlir
// DUMP-NEXT: 6-to-emitc.mlir
// DUMP-NEXT: 7-emit.hip
// MLIR: module attributes {ep.lowering = "simt", ep.specialization = {hidden = 64 : index}, ep.target = "gfx950"}
// MLIR: ep.lane.quantize_chunk
// INPUT: ep.specialization = {hidden = 64 : index}
// INPUT: ep.warp.quantize
// UNKNOWN: epjit-compile: error: unknown template 'quantize_fp9'; templates: dequantize_fp8_blockwise, dequantize_fp8_direct, dequantize_mxfp4, ep/buffers, ep/combine, ep/combine_entries, ep/combine_gather, ep/combine_low_latency, ep/combine_scatter, ep/common, ep/counts, ep/dispatch, ep/internode, ep/internode_v2, ep/layout, ep/narrow, ep/order, ep/received, ep/std_moe, ep/std_moe_quantize, ep/sync, ep_dispatch_combine, ep_peer_copy, quantize_fp8_blockwise, quantize_fp8_direct, quantize_mxfp4
// MISSING: error: parameter 'hidden' is not bound: pass hidden=VALUE (index)
// ILLTYPED: error: parameter 'hidden' takes an integer (index); got 'lots'
// CONSTRAINT: error: parameter 'hidden' = 7 must be a multiple of 2
// TARGET: epjit-compile: error: unknown target 'gfx90a'; targets: gfx942, gfx950, gfx1250, gfx1200, sm90, sm100, host, host-gfx942, host-gfx950, host-gfx1250, host-sm100
// EMIT: epjit-compile: error: --emit takes mlir, hip, interface, bin or asm; got 'elf'
// BOTH: epjit-compile: error: give exactly one of --template NAME and --input FILE.mlir
// NOTARGET: epjit-compile: error: --target is required
