// numerics.h must stay usable from C++17 host code: this TU is compiled with
// -std=c++17 and evaluates a few conversions at compile time.
#include "epjit/numerics.h"

#if __cplusplus != 201703L
#error "this translation unit is meant to be compiled as C++17"
#endif

static_assert(epjit::encode_fp8(1.0f, epjit::Fp8Format::E4M3FN) == 0x38, "");
static_assert(epjit::decode_bf16(epjit::encode_bf16(1.5f)) == 1.5f, "");
static_assert(epjit::encode_fp4_e2m1(2.5f) == 0x4, "");

int epjit_numerics_cxx17_consumer() { return epjit::encode_e8m0(2.0f); }
