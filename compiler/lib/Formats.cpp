#include "epjit/Compiler/Formats.h"

namespace epjit {

Fp8Format resolveFp8(ep::Fp8Kind kind, const TargetInfo& target) {
  switch (kind) {
    case ep::Fp8Kind::e4m3fn: return Fp8Format::E4M3FN;
    case ep::Fp8Kind::e4m3fnuz: return Fp8Format::E4M3FNUZ;
    case ep::Fp8Kind::e5m2: return Fp8Format::E5M2;
    case ep::Fp8Kind::e5m2fnuz: return Fp8Format::E5M2FNUZ;
    case ep::Fp8Kind::target: return target.fp8_e4m3;
    case ep::Fp8Kind::target_e5m2: return target.fp8_e5m2;
  }
  return target.fp8_e4m3;
}

ep::Fp8Kind fp8KindOf(Fp8Format format) {
  switch (format) {
    case Fp8Format::E4M3FN: return ep::Fp8Kind::e4m3fn;
    case Fp8Format::E4M3FNUZ: return ep::Fp8Kind::e4m3fnuz;
    case Fp8Format::E5M2: return ep::Fp8Kind::e5m2;
    case Fp8Format::E5M2FNUZ: return ep::Fp8Kind::e5m2fnuz;
  }
  return ep::Fp8Kind::e4m3fn;
}

}  // namespace epjit
