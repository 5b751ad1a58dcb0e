// A kernel's when(...) names scalar parameters of its template, and compares
// a parameter with one of its own names; anything else is an error naming
// the kernel and what it may use.
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=64,quant=none -split-input-file 2>&1 | FileCheck %s
// CHECK: error: kernel @k_nodes is conditioned on 'nodes', which is not a scalar parameter; this template's parameters are: hidden, quant
// CHECK: error: kernel @k_fp4 compares 'quant' with "fp4", which is not one of its names (none, fp8_direct_cast, fp8_blockwise)
// CHECK: error: kernel @k_named compares 'hidden' with "wide", which is not one of its names (it has none: compare with an integer)
// CHECK: error: kernel @k_second is conditioned on 'nodes', which is not a scalar parameter; this template's parameters are: hidden, quant

ep.param @hidden : index
ep.param @quant : index {names = ["none", "fp8_direct_cast", "fp8_blockwise"]}
ep.kernel @k_nodes() warps_per_block(4) when(@nodes lt @hidden) {}

// -----

ep.param @hidden : index
ep.param @quant : index {names = ["none", "fp8_direct_cast", "fp8_blockwise"]}
ep.kernel @k_fp4() warps_per_block(4) when(@quant eq "fp4") {}

// -----

ep.param @hidden : index
ep.param @quant : index {names = ["none", "fp8_direct_cast", "fp8_blockwise"]}
ep.kernel @k_named() warps_per_block(4) when(@hidden eq "wide") {}

// -----

// A later clause is checked even when an earlier one already fails.
ep.param @hidden : index
ep.param @quant : index {names = ["none", "fp8_direct_cast", "fp8_blockwise"]}
ep.kernel @k_second() warps_per_block(4) when(@hidden gt 100 and @nodes lt 2) {}
