// ep-check-target: reject what the target cannot do, naming who can.
#include "mlir/IR/Builders.h"

#include "epjit/Compiler/Formats.h"
#include "epjit/Compiler/Passes.h"
#include "epjit/Dialect/Ep/EpOps.h"
#include "epjit/targets/TargetInfo.h"

namespace epjit {
#define GEN_PASS_DEF_EPCHECKTARGET
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

// FP4 needs a target that converts it, in hardware or with the numerics.h
// codec (sm90); software_fallback does not bring the codec to gfx942 or
// gfx1200, whose numerics have no FP4 (NUMERICS.md).
LogicalResult checkFp4(Operation* op, const TargetInfo& target) {
  if (target.has_fp4()) return success();
  const std::string withHardware =
      target_names_where([](const TargetInfo& t) { return t.converts_fp4_in_hardware(); });
  const std::string inSoftware =
      target_names_where([](const TargetInfo& t) { return !t.is_host() && t.fp4 == Fp4Support::Software; });
  return op->emitError() << "target " << target.name
                         << " has no FP4 (E2M1) conversion instructions; targets with them: " << withHardware
                         << "; in software (the numerics.h codec): " << inSoftware;
}

LogicalResult checkFp8(Operation* op, const TargetInfo& target, ep::Fp8Kind kind, bool softwareFallback) {
  const Fp8Format format = resolveFp8(kind, target);
  if (target.is_host() || target.converts_fp8_in_hardware(format) || softwareFallback) return success();
  const std::string withFormat =
      target_names_where([&](const TargetInfo& t) { return t.converts_fp8_in_hardware(format); });
  return op->emitError() << "target " << target.name << " converts " << fp8_format_name(target.fp8_e4m3) << " and "
                         << fp8_format_name(target.fp8_e5m2) << " in hardware, not " << fp8_format_name(format)
                         << "; targets that do: " << withFormat
                         << " (use #ep.fp8<target>, or ask for `software_fallback`)";
}

template <typename OpT>
LogicalResult checkConversion(OpT op, const TargetInfo& target) {
  const bool fallback = op.getSoftwareFallback().has_value();
  if (isa<ep::Fp4KindAttr>(op.getFormat())) return checkFp4(op, target);
  return checkFp8(op, target, cast<ep::Fp8KindAttr>(op.getFormat()).getValue(), fallback);
}

// A parameter bounded by a target fact (ep.param's at_most) holds a binding
// no larger than the fact on this target.
LogicalResult checkTargetBounds(ModuleOp module, const TargetInfo& target) {
  auto bounds = module->getAttrOfType<DictionaryAttr>(ep::EpDialect::kTargetBoundsAttrName);
  if (!bounds) return success();
  auto bindings = module->getAttrOfType<DictionaryAttr>(ep::EpDialect::kSpecializationAttrName);
  for (NamedAttribute bound : bounds) {
    auto value = bindings ? dyn_cast_or_null<IntegerAttr>(bindings.get(bound.getName())) : IntegerAttr();
    if (!value) continue;
    const int64_t limit = target.wave_size;  // the one fact a bound names (ParamOp's verifier)
    if (const int64_t bound_value = value.getValue().getSExtValue(); bound_value > limit)
      return module.emitError() << "parameter '" << bound.getName().strref() << "' = " << bound_value
                                << " exceeds its bound at_most = " << cast<StringAttr>(bound.getValue()) << ": the "
                                << "wave size of " << target.name << " is " << limit;
  }
  return success();
}

struct EpCheckTarget : impl::EpCheckTargetBase<EpCheckTarget> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const TargetInfo* info = find_target(target);
    if (!info) {
      module.emitError() << "unknown target '" << target << "'; known targets: " << target_names();
      return signalPassFailure();
    }
    module->setAttr(ep::EpDialect::kTargetAttrName, StringAttr::get(&getContext(), info->name));
    if (mlir::failed(checkTargetBounds(module, *info))) return signalPassFailure();
    bool failed = false;
    module.walk([&](Operation* op) {
      LogicalResult result = success();
      if (auto quantize = dyn_cast<ep::WarpQuantizeOp>(op)) result = checkConversion(quantize, *info);
      if (auto dequantize = dyn_cast<ep::WarpDequantizeOp>(op)) result = checkConversion(dequantize, *info);
      if (auto sum = dyn_cast<ep::WarpSumRowsOp>(op); sum && sum.getFormat())
        result = checkFp8(op, *info, sum.getFormatAttr().getValue(), /*softwareFallback=*/false);
      failed |= mlir::failed(result);
    });
    if (failed) signalPassFailure();
  }
};

}  // namespace
}  // namespace epjit
