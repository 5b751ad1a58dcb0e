// ep-to-emitc: kernels to EmitC that calls the target prelude.
#include "mlir/Conversion/ArithToEmitC/ArithToEmitC.h"
#include "mlir/Conversion/FuncToEmitC/FuncToEmitC.h"
#include "mlir/Conversion/SCFToEmitC/SCFToEmitC.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "EpToEmitC.h"
#include "epjit/Compiler/Passes.h"
#include "epjit/Compiler/Target.h"
#include "epjit/targets/common/window.h"

namespace epjit {
#define GEN_PASS_DEF_EPTOEMITC
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

struct Kernel {
  std::string name;
  int64_t warpsPerBlock;
};

// extern "C", then what the target puts in front of a kernel (TargetInfo).
ArrayAttr kernelSpecifiers(Builder& builder, const TargetInfo& target, const Kernel& kernel) {
  SmallVector<Attribute> specifiers = {builder.getStringAttr("extern \"C\"")};
  for (const std::string& specifier : target.kernel_specifiers(kernel.warpsPerBlock * target.wave_size))
    specifiers.push_back(builder.getStringAttr(specifier));
  return builder.getArrayAttr(specifiers);
}

// extern "C" void NAME__epjit_host_entry(void** args, const epjit::host::WarpContext* warp):
// how the host device launches a kernel, one call per warp with its context.
void buildHostEntry(OpBuilder& builder, emitc::FuncOp kernel) {
  MLIRContext* context = builder.getContext();
  Location loc = kernel.getLoc();
  auto voidPointer = emitc::PointerType::get(emitc::OpaqueType::get(context, "void"));
  auto argsType = emitc::PointerType::get(voidPointer);
  auto warpType = emitc::PointerType::get(emitc::OpaqueType::get(context, "const epjit::host::WarpContext"));
  auto entry = emitc::FuncOp::create(builder, loc, (kernel.getSymName() + "__epjit_host_entry").str(),
                                     FunctionType::get(context, {argsType, warpType}, {}));
  entry.setSpecifiersAttr(builder.getStrArrayAttr({"extern \"C\""}));
  Block* body = entry.addEntryBlock();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(body);
  emitc::CallOpaqueOp::create(builder, loc, TypeRange{}, "epjit::host::enter", ValueRange{body->getArgument(1)});
  SmallVector<Value> arguments;
  for (auto [index, type] : llvm::enumerate(kernel.getArgumentTypes())) {
    ArrayAttr args = builder.getArrayAttr({builder.getIndexAttr(0), builder.getI32IntegerAttr(int32_t(index))});
    ArrayAttr templateArgs = builder.getArrayAttr({TypeAttr::get(type)});
    arguments.push_back(
        emitc::CallOpaqueOp::create(builder, loc, TypeRange{type}, "epjit::host::arg", ValueRange{body->getArgument(0)},
                                    args, templateArgs)
            .getResult(0));
  }
  emitc::CallOp::create(builder, loc, kernel, arguments);
  emitc::ReturnOp::create(builder, loc, Value());
}

// A kernel takes the window table by value (EPJIT_WINDOW_PARAM, which the
// prelude defines: a __grid_constant__ parameter on NVIDIA, a kernarg on
// AMD), so its loads come from the constant/scalar cache, not global memory:
// a table in global memory cost one dependent L2 round trip before every
// peer access on the critical path of a small call (acquire loads invalidate
// L1). The body keeps using a pointer: epjit::window_address(param).
void takeWindowByValue(OpBuilder& builder, emitc::FuncOp kernel) {
  MLIRContext* context = builder.getContext();
  auto pointerType = emitc::PointerType::get(emitc::OpaqueType::get(context, "const epjit::Window"));
  auto valueType = emitc::OpaqueType::get(context, "EPJIT_WINDOW_PARAM");
  Block& entry = kernel.getBody().front();
  SmallVector<Type> inputs(kernel.getArgumentTypes());
  for (BlockArgument argument : entry.getArguments()) {
    if (argument.getType() != pointerType) continue;
    argument.setType(valueType);
    inputs[argument.getArgNumber()] = valueType;
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&entry);
    auto address = emitc::CallOpaqueOp::create(builder, kernel.getLoc(), TypeRange{pointerType},
                                               "epjit::window_address", ValueRange{argument});
    argument.replaceAllUsesExcept(address.getResult(0), address);
  }
  kernel.setFunctionTypeAttr(TypeAttr::get(FunctionType::get(context, inputs, kernel.getResultTypes())));
}

// On a target with programmatic dependent launch (TargetInfo::dependent_launch)
// every kernel first lets the next one on the stream launch
// (epjit::launch_dependent_grids), and waits for the one before it
// (epjit::wait_for_prior_grid) before its first memory access: the runtime
// may then launch it while that kernel still runs, which hides the launch
// and block scheduling. The wait goes before the entry block's first
// operation that is not free of memory effects; what comes before it is
// computed from the parameters alone (constants, block and warp indices, the
// window table's peer addresses: constant-cache reads), so its misses
// overlap the kernel before. (ep.prefetch declares no effects at all, so it
// counts as touching memory, as it must: a line it brought in early could be
// one the kernel before is still writing.) The interface record says the
// kernels wait, and the runtime launches that way only the kernels whose
// record says so. Runs on the ep.kernel, before conversion, where ops say
// what memory they touch.
void waitForPriorGrid(OpBuilder& builder, ep::KernelOp kernel) {
  OpBuilder::InsertionGuard guard(builder);
  Block& entry = kernel.getBody().front();
  Operation* firstAccess = entry.getTerminator();
  for (Operation& op : entry.without_terminator())
    if (!isMemoryEffectFree(&op)) {
      firstAccess = &op;
      break;
    }
  builder.setInsertionPoint(firstAccess);
  emitc::CallOpaqueOp::create(builder, kernel.getLoc(), TypeRange{}, "epjit::wait_for_prior_grid", ValueRange{});
  builder.setInsertionPointToStart(&entry);
  emitc::CallOpaqueOp::create(builder, kernel.getLoc(), TypeRange{}, "epjit::launch_dependent_grids", ValueRange{});
}

// ep.kernel -> emitc.func with the converted parameter types; the specifiers
// (extern "C", the target's kernel qualifiers and launch bounds) are set once every op is converted.
struct KernelPattern : OpConversionPattern<ep::KernelOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::KernelOp op, OpAdaptor, ConversionPatternRewriter& rewriter) const override {
    TypeConverter::SignatureConversion signature(op.getArgumentTypes().size());
    for (auto [index, type] : llvm::enumerate(op.getArgumentTypes())) {
      Type converted = getTypeConverter()->convertType(type);
      if (!converted) return rewriter.notifyMatchFailure(op, "a parameter type has no C form");
      signature.addInputs(unsigned(index), converted);
    }
    auto func = emitc::FuncOp::create(rewriter, op.getLoc(), op.getSymName(),
                                      rewriter.getFunctionType(signature.getConvertedTypes(), {}));
    rewriter.inlineRegionBefore(op.getBody(), func.getBody(), func.end());
    if (failed(rewriter.convertRegionTypes(&func.getBody(), *getTypeConverter(), &signature))) return failure();
    rewriter.eraseOp(op);
    return success();
  }
};

// func.call -> emitc.call with converted result types (upstream's pattern
// keeps them as they were, so a helper returning index would not convert).
struct CallPattern : OpConversionPattern<func::CallOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(func::CallOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    SmallVector<Type> results;
    if (failed(getTypeConverter()->convertTypes(op.getResultTypes(), results)))
      return rewriter.notifyMatchFailure(op, "a result type has no EmitC form");
    auto call = emitc::CallOp::create(rewriter, op.getLoc(), op.getCallee(), results, adaptor.getOperands());
    rewriter.replaceOp(op, call.getResults());
    return success();
  }
};

struct ReturnPattern : OpConversionPattern<ep::ReturnOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::ReturnOp op, OpAdaptor, ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOpWithNewOp<emitc::ReturnOp>(op, Value());
    return success();
  }
};

struct EpToEmitC : impl::EpToEmitCBase<EpToEmitC> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext* context = &getContext();
    const TargetInfo* target = requireModuleTarget(module, getArgument());
    if (!target) return signalPassFailure();
    if (!module->hasAttr(ep::EpDialect::kLoweringAttrName)) {
      module.emitError() << "ep-to-emitc needs lane primitives: run ep-lower-warp-ops first";
      return signalPassFailure();
    }

    SmallVector<Kernel> kernels;
    OpBuilder builder(context);
    for (auto kernel : module.getOps<ep::KernelOp>()) {
      kernels.push_back({kernel.getSymName().str(), int64_t(kernel.getWarpsPerBlock())});
      if (target->dependent_launch) waitForPriorGrid(builder, kernel);
    }
    // Regions are numbered in declaration order (the runtime lays the window
    // out in the same order, from the interface record); their count bodies
    // were for the record and go with them.
    llvm::StringMap<int64_t> regions;
    for (auto region : llvm::make_early_inc_range(module.getOps<ep::WindowRegionOp>())) {
      regions[region.getSymName()] = int64_t(regions.size());
      region.erase();
    }
    // Buffer parts were for the record too: kernels reached them through
    // ep.buffer_offset, folded by ep-specialize.
    for (auto part : llvm::make_early_inc_range(module.getOps<ep::BufferPartOp>())) part.erase();
    if (regions.size() > size_t(kMaxWindowRegions)) {
      module.emitError() << "the template declares " << regions.size() << " window regions; a window has at most "
                         << kMaxWindowRegions;
      return signalPassFailure();
    }

    TypeConverter converter;
    to_emitc::populateTypeConversions(converter);
    RewritePatternSet patterns(context);
    populateFuncToEmitCPatterns(converter, patterns);
    populateSCFToEmitCConversionPatterns(patterns, converter);
    populateArithToEmitCPatterns(converter, patterns);
    to_emitc::populateScalarPatterns(converter, patterns, regions);
    to_emitc::populateLanePatterns(converter, patterns);
    patterns.add<KernelPattern, ReturnPattern>(converter, context);
    patterns.add<CallPattern>(converter, context, /*benefit=*/2);

    ConversionTarget legal(*context);
    legal.addLegalDialect<emitc::EmitCDialect>();
    legal.addLegalOp<ModuleOp>();
    legal.addIllegalDialect<arith::ArithDialect, scf::SCFDialect, func::FuncDialect>();
    legal.addIllegalDialect<ep::EpDialect>();
    if (failed(applyFullConversion(module, legal, std::move(patterns)))) return signalPassFailure();

    // Helpers a kernel calls run where it runs: on the device for GPU targets.
    for (auto func : module.getOps<emitc::FuncOp>()) {
      if (llvm::any_of(kernels, [&](const Kernel& kernel) { return kernel.name == func.getSymName(); })) continue;
      if (func.isExternal()) continue;
      func.setSpecifiersAttr(builder.getStrArrayAttr({"static", "EPJIT_DEVICE"}));
    }
    for (const Kernel& kernel : kernels) {
      auto func = module.lookupSymbol<emitc::FuncOp>(kernel.name);
      func.setSpecifiersAttr(kernelSpecifiers(builder, *target, kernel));
      takeWindowByValue(builder, func);
      if (target->is_host()) {
        builder.setInsertionPointAfter(func);
        buildHostEntry(builder, func);
      }
    }
    // The target's facts, from TargetInfo alone, where its prelude reads them.
    builder.setInsertionPointToStart(module.getBody());
    for (const PreludeDefine& define : target->prelude_defines())
      emitc::VerbatimOp::create(builder, module.getLoc(), "#define " + std::string(define.name) + " " + define.value);
    emitc::IncludeOp::create(builder, module.getLoc(), builder.getStringAttr(target->prelude));
  }
};

}  // namespace
}  // namespace epjit
