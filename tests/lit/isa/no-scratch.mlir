// No kernel uses scratch memory on any AMD target, read from each code
// object's metadata (odd hidden sizes included: the partial-chunk paths).
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=37 --target gfx942 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_fp8_direct --set hidden=37 --target gfx942 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_fp8_blockwise --set hidden=333 --target gfx942 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_fp8_blockwise --set hidden=333 --target gfx942 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=37 --target gfx950 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_fp8_direct --set hidden=37 --target gfx950 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_fp8_blockwise --set hidden=333 --target gfx950 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_fp8_blockwise --set hidden=333 --target gfx950 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=86 --target gfx950 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_mxfp4 --set hidden=86 --target gfx950 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=37 --target gfx1250 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_fp8_direct --set hidden=37 --target gfx1250 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_fp8_blockwise --set hidden=333 --target gfx1250 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_fp8_blockwise --set hidden=333 --target gfx1250 --emit asm | FileCheck %s
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=86 --target gfx1250 --emit asm | FileCheck %s
// RUN: epjit-compile --template dequantize_mxfp4 --set hidden=86 --target gfx1250 --emit asm | FileCheck %s

// CHECK: ; resources {{[a-z_0-9]+}}: wave {{32|64}} vgpr {{[0-9]+}} sgpr {{[0-9]+}} agpr {{-?[0-9]+}} lds 0 scratch 0 code {{[0-9]+}}
