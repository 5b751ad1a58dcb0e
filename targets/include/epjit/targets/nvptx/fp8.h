// sm90 fp8: cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b puts a in the HIGH
// byte and b in the low byte (the opposite of AMD), so operands are swapped
// to keep element 0 in the low byte. satfinite clamps to +-max (and Inf to
// max), which is the saturating rule. Decoding uses the numerics.h codec.
#pragma once

#include "epjit/targets/nvptx/device.h"

namespace epjit::prim {

// cvt.rn.satfinite as the fp8 chunks' codec (common/chunks.h); decoding is
// numerics.h's.
struct PtxSatfiniteFp8Codec {
  template <Fp8Format F>
  EPJIT_DEVICE static uint32_t pack2(float first, float second) {
    unsigned short pair;
    if constexpr (F == Fp8Format::E5M2) {
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(second), "f"(first));
    } else {
      static_assert(F == Fp8Format::E4M3FN, "sm90 converts e4m3fn and e5m2 in hardware");
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(second), "f"(first));
    }
    return pair;
  }

  template <Fp8Format F>
  EPJIT_DEVICE static uint32_t pack4(const float* x) {
    return pack2<F>(x[0], x[1]) | (pack2<F>(x[2], x[3]) << 16);
  }

  template <Fp8Format F>
  EPJIT_DEVICE static void unpack4(uint32_t word, float* x) {
    SoftwareFp8Codec::unpack4<F>(word, x);
  }
};

// ConversionMethod::ptx_cvt_satfinite.
struct ptx_cvt_satfinite : Fp8Chunks<PtxSatfiniteFp8Codec> {};

}  // namespace epjit::prim
