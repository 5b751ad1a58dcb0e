// ep-to-emitc patterns for warp-uniform scalars: geometry, memory, windows,
// atomics, fences, waits and barriers. Each becomes a prelude call (or plain
// C pointer arithmetic and subscripts).
#include "mlir/Dialect/Arith/IR/Arith.h"

#include "EpToEmitC.h"

namespace epjit::to_emitc {
namespace {

using namespace mlir;

// An op with no operands whose value comes from a prelude function.
template <typename OpT>
struct GeometryPattern : OpConversionPattern<OpT> {
  GeometryPattern(TypeConverter& converter, MLIRContext* context, StringRef callee)
      : OpConversionPattern<OpT>(converter, context), callee(callee.str()) {}
  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor, ConversionPatternRewriter& rewriter) const override {
    Type type = this->getTypeConverter()->convertType(op.getType());
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), callee, type, {}));
    return success();
  }
  std::string callee;
};

struct PtrAddPattern : OpConversionPattern<ep::PtrAddOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::PtrAddOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, offsetPointer(rewriter, op.getLoc(), adaptor.getBase(), adaptor.getOffset()));
    return success();
  }
};

Value elementLValue(OpBuilder& builder, Location loc, Value ptr, Value index) {
  auto pointer = cast<emitc::PointerType>(ptr.getType());
  return emitc::SubscriptOp::create(builder, loc, emitc::LValueType::get(pointer.getPointee()), ptr,
                                    ValueRange{index});
}

struct LoadPattern : OpConversionPattern<ep::LoadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LoadOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    if (op.getType().isBF16() || op.getType().isF16())
      return rewriter.notifyMatchFailure(op, "scalar 16-bit float loads are not supported; use warp ops on rows");
    Value address = offsetPointer(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::warp_load",
                                       getTypeConverter()->convertType(op.getType()), {address}));
    return success();
  }
};

struct LaneLoadPattern : OpConversionPattern<ep::LaneLoadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneLoadOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    Value lvalue = elementLValue(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    rewriter.replaceOpWithNewOp<emitc::LoadOp>(op, getTypeConverter()->convertType(op.getType()), lvalue);
    return success();
  }
};

struct StorePattern : OpConversionPattern<ep::StoreOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::StoreOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    if (op.getValue().getType().isBF16() || op.getValue().getType().isF16())
      return rewriter.notifyMatchFailure(op, "scalar 16-bit float stores are not supported; use warp ops on rows");
    Value lvalue = elementLValue(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    emitc::AssignOp::create(rewriter, op.getLoc(), lvalue, adaptor.getValue());
    rewriter.eraseOp(op);
    return success();
  }
};

struct PeerPtrPattern : OpConversionPattern<ep::PeerPtrOp> {
  PeerPtrPattern(TypeConverter& converter, MLIRContext* context, const llvm::StringMap<int64_t>& regions)
      : OpConversionPattern(converter, context), regions(regions) {}
  LogicalResult matchAndRewrite(ep::PeerPtrOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    auto pointer = cast<emitc::PointerType>(getTypeConverter()->convertType(op.getType()));
    auto region = regions.find(op.getRegion());
    if (region == regions.end()) return rewriter.notifyMatchFailure(op, "unknown window region");
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::peer_ptr", pointer,
                                       {adaptor.getWindow(), adaptor.getRank(), adaptor.getOffset()},
                                       {cTypeName(pointer.getPointee()), std::to_string(region->second)}));
    return success();
  }
  const llvm::StringMap<int64_t>& regions;
};

struct RuntimeParamPattern : OpConversionPattern<ep::RuntimeParamOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::RuntimeParamOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::runtime_param",
                                       getTypeConverter()->convertType(op.getType()), {adaptor.getWindow()},
                                       {std::to_string(op.getIndex())}));
    return success();
  }
};

struct AtomicRmwPattern : OpConversionPattern<ep::AtomicRmwOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::AtomicRmwOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    const std::string callee = "epjit::warp_atomic_" + stringifyEnum(op.getKind()).str();
    Value address = offsetPointer(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), callee, getTypeConverter()->convertType(op.getType()),
                                       {address, adaptor.getValue()},
                                       {preludeName(op.getScope()), preludeName(op.getOrder())}));
    return success();
  }
};

struct AtomicLoadPattern : OpConversionPattern<ep::AtomicLoadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::AtomicLoadOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    Value address = offsetPointer(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::atomic_load",
                                       getTypeConverter()->convertType(op.getType()), {address},
                                       {preludeName(op.getScope()), preludeName(op.getOrder())}));
    return success();
  }
};

struct AtomicStorePattern : OpConversionPattern<ep::AtomicStoreOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::AtomicStoreOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    Value address = offsetPointer(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    callPrelude(rewriter, op.getLoc(), "epjit::warp_atomic_store", {}, {address, adaptor.getValue()},
                {preludeName(op.getScope()), preludeName(op.getOrder())});
    rewriter.eraseOp(op);
    return success();
  }
};

struct PrefetchPattern : OpConversionPattern<ep::PrefetchOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::PrefetchOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    Value address = offsetPointer(rewriter, op.getLoc(), adaptor.getPtr(), adaptor.getIndex());
    callPrelude(rewriter, op.getLoc(), "epjit::warp_prefetch", {}, {address}, {});
    rewriter.eraseOp(op);
    return success();
  }
};

struct FencePattern : OpConversionPattern<ep::FenceOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::FenceOp op, OpAdaptor, ConversionPatternRewriter& rewriter) const override {
    callPrelude(rewriter, op.getLoc(), "epjit::fence", {}, {},
                {preludeName(op.getScope()), preludeName(op.getOrder())});
    rewriter.eraseOp(op);
    return success();
  }
};

struct WaitUntilPattern : OpConversionPattern<ep::WaitUntilOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::WaitUntilOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    Location loc = op.getLoc();
    Value flag = offsetPointer(rewriter, loc, adaptor.getFlag(), adaptor.getIndex());
    Value error = offsetPointer(rewriter, loc, adaptor.getError(), adaptor.getErrorIndex());
    const std::string predicate = "epjit::Until::" + llvm::StringRef(stringifyEnum(op.getPredicate())).upper();
    rewriter.replaceOp(op, callPrelude(rewriter, loc, "epjit::warp_wait_until", rewriter.getI1Type(),
                                       {flag, adaptor.getValue(), error, adaptor.getCode(), adaptor.getTimeoutMs()},
                                       {predicate, preludeName(op.getScope())}));
    return success();
  }
};

// A barrier is a prelude call of the same name (epjit::block_barrier,
// epjit::warp_barrier): each target says what it takes.
template <typename BarrierOp>
struct BarrierPattern : OpConversionPattern<BarrierOp> {
  BarrierPattern(TypeConverter& converter, MLIRContext* context, StringRef prelude)
      : OpConversionPattern<BarrierOp>(converter, context), prelude(prelude) {}
  LogicalResult matchAndRewrite(BarrierOp op, typename BarrierOp::Adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    callPrelude(rewriter, op.getLoc(), prelude, {}, {});
    rewriter.eraseOp(op);
    return success();
  }
  StringRef prelude;
};

// A barrier with a vote (ep.block_any): epjit::block_any(predicate) on every
// target, whose prelude says how the block's warps share the answer.
struct BlockAnyPattern : OpConversionPattern<ep::BlockAnyOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::BlockAnyOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::block_any", rewriter.getI1Type(),
                                       {adaptor.getPredicate()}, {}));
    return success();
  }
};

// Unsigned division and remainder of index values: size_t in C is unsigned,
// so they are plain C / and % (upstream arith-to-emitc leaves index ones out).
template <typename ArithOp, typename EmitCOp>
struct IndexUnsignedPattern : OpConversionPattern<ArithOp> {
  using OpConversionPattern<ArithOp>::OpConversionPattern;
  LogicalResult matchAndRewrite(ArithOp op, typename ArithOp::Adaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    if (!op.getType().isIndex()) return rewriter.notifyMatchFailure(op, "only index operands");
    Type type = this->getTypeConverter()->convertType(op.getType());
    rewriter.replaceOpWithNewOp<EmitCOp>(op, type, adaptor.getLhs(), adaptor.getRhs());
    return success();
  }
};

}  // namespace

void populateScalarPatterns(TypeConverter& converter, RewritePatternSet& patterns,
                            const llvm::StringMap<int64_t>& regionIndex) {
  MLIRContext* context = patterns.getContext();
  patterns.add<GeometryPattern<ep::WarpIndexOp>>(converter, context, "epjit::warp_index");
  patterns.add<GeometryPattern<ep::GlobalWarpIndexOp>>(converter, context, "epjit::global_warp_index");
  patterns.add<GeometryPattern<ep::GlobalWarpCountOp>>(converter, context, "epjit::global_warp_count");
  patterns.add<GeometryPattern<ep::BlockIndexOp>>(converter, context, "epjit::block_index");
  patterns.add<GeometryPattern<ep::BlockCountOp>>(converter, context, "epjit::block_count");
  patterns.add<GeometryPattern<ep::LaneIdOp>>(converter, context, "epjit::lane_id");
  patterns.add<PtrAddPattern, LoadPattern, LaneLoadPattern, StorePattern, AtomicRmwPattern, AtomicLoadPattern, AtomicStorePattern,
               PrefetchPattern, FencePattern, WaitUntilPattern>(converter, context);
  patterns.add<BarrierPattern<ep::BlockBarrierOp>>(converter, context, "epjit::block_barrier");
  patterns.add<BarrierPattern<ep::WarpBarrierOp>>(converter, context, "epjit::warp_barrier");
  patterns.add<BlockAnyPattern>(converter, context);
  patterns.add<PeerPtrPattern>(converter, context, regionIndex);
  patterns.add<RuntimeParamPattern>(converter, context);
  patterns.add<IndexUnsignedPattern<arith::DivUIOp, emitc::DivOp>, IndexUnsignedPattern<arith::RemUIOp, emitc::RemOp>>(
      converter, context);
}

}  // namespace epjit::to_emitc
