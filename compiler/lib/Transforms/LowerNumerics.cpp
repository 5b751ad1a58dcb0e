// ep-lower-numerics: concrete formats, and the primitive each conversion uses.
#include "mlir/IR/Builders.h"

#include "epjit/Compiler/Formats.h"
#include "epjit/Compiler/Passes.h"
#include "epjit/Compiler/Target.h"
#include "epjit/Dialect/Ep/EpOps.h"

namespace epjit {
#define GEN_PASS_DEF_EPLOWERNUMERICS
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

ep::ConversionMethod fp4Method(const TargetInfo& target) {
  switch (target.fp4) {
    case Fp4Support::Pack2: return ep::ConversionMethod::amdgcn_scalef32_pk_fp4;
    case Fp4Support::Pack8: return ep::ConversionMethod::amdgcn_scalef32_pk8_fp4;
    case Fp4Support::PtxPair: return ep::ConversionMethod::ptx_cvt_e2m1x2;
    case Fp4Support::Software:
    case Fp4Support::None:  // not reached: ep-check-target refuses FP4 there
      return ep::ConversionMethod::software;
  }
  return ep::ConversionMethod::software;
}

ep::ConversionMethod fp8Method(const TargetInfo& target, Fp8Format format) {
  if (!target.converts_fp8_in_hardware(format)) return ep::ConversionMethod::software;
  switch (target.fp8_conversion) {
    case Fp8Conversion::AmdgcnPk: return ep::ConversionMethod::amdgcn_pk_fp8;
    case Fp8Conversion::PtxSatfinite: return ep::ConversionMethod::ptx_cvt_satfinite;
    case Fp8Conversion::Software: return ep::ConversionMethod::software;
  }
  return ep::ConversionMethod::software;
}

template <typename OpT>
void lowerConversion(OpT op, const TargetInfo& target) {
  MLIRContext* context = op.getContext();
  ep::ConversionMethod method;
  if (isa<ep::Fp4KindAttr>(op.getFormat())) {
    method = fp4Method(target);
  } else {
    const Fp8Format format = resolveFp8(cast<ep::Fp8KindAttr>(op.getFormat()).getValue(), target);
    op.setFormatAttr(ep::Fp8KindAttr::get(context, fp8KindOf(format)));
    method = fp8Method(target, format);
  }
  op.setMethodAttr(ep::ConversionMethodAttr::get(context, method));
}

// A sum of fp8 codes decodes them with the target's primitive for the format.
void lowerSumFormat(ep::WarpSumRowsOp op, const TargetInfo& target) {
  MLIRContext* context = op.getContext();
  const Fp8Format format = resolveFp8(op.getFormatAttr().getValue(), target);
  op.setFormatAttr(ep::Fp8KindAttr::get(context, fp8KindOf(format)));
  op.setMethodAttr(ep::ConversionMethodAttr::get(context, fp8Method(target, format)));
}

struct EpLowerNumerics : impl::EpLowerNumericsBase<EpLowerNumerics> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const TargetInfo* target = requireModuleTarget(module, getArgument());
    if (!target) return signalPassFailure();
    module.walk([&](Operation* op) {
      if (auto quantize = dyn_cast<ep::WarpQuantizeOp>(op)) lowerConversion(quantize, *target);
      if (auto dequantize = dyn_cast<ep::WarpDequantizeOp>(op)) lowerConversion(dequantize, *target);
      if (auto sum = dyn_cast<ep::WarpSumRowsOp>(op); sum && sum.getFormat()) lowerSumFormat(sum, *target);
    });
  }
};

}  // namespace
}  // namespace epjit
