// sm90 PTX: fp8 through cvt.rn.satfinite.e4m3x2.f32 (saturating); no spills.
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=7168 --target sm90 --emit asm | FileCheck %s --check-prefix=SM90
// RUN: epjit-compile --template quantize_fp8_blockwise --set hidden=7168 --target sm90 --emit asm | FileCheck %s --check-prefix=SM90-BW
// RUN: not epjit-compile --template quantize_mxfp4 --set hidden=7168 --target sm90 --emit asm 2>&1 | FileCheck %s --check-prefix=SM90-FP4

// SM90: .target sm_90
// SM90: .entry quantize_fp8_direct
// SM90: griddepcontrol.launch_dependents;
// SM90: griddepcontrol.wait;
// SM90: cvt.rn.satfinite.e4m3x2.f32
// SM90: ; resources quantize_fp8_direct: registers {{[0-9]+}} spill 0 stack 0 code

// SM90-BW: shfl.sync.bfly
// SM90-BW: div.rn.f32
// SM90-BW: cvt.rn.satfinite.e4m3x2.f32
// SM90-BW: ; resources quantize_fp8_blockwise: registers {{[0-9]+}} spill 0 stack 0 code

// SM90-FP4: error: target sm90 has no FP4 (E2M1) conversion instructions
