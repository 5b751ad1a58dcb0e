// ep-to-emitc patterns for the lane primitives that ep-lower-warp-ops
// produced: chunk conversions, copies, accumulations and reductions become
// calls into the prelude namespace of their conversion method.
#include "EpToEmitC.h"

namespace epjit::to_emitc {
namespace {

using namespace mlir;

std::string boolName(bool value) { return value ? "true" : "false"; }

// quantize_chunk / dequantize_chunk: the callee names the element family and
// how the scale is given; the namespace names the conversion method.
template <typename OpT>
struct ChunkConvertPattern : OpConversionPattern<OpT> {
  ChunkConvertPattern(TypeConverter& converter, MLIRContext* context, StringRef verb)
      : OpConversionPattern<OpT>(converter, context), verb(verb.str()) {}

  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    Location loc = op.getLoc();
    const bool fp4 = isa<ep::Fp4KindAttr>(op.getFormat());
    std::string callee = preludeNamespace(op.getMethod()) + "::" + verb + (fp4 ? "_fp4_chunk" : "_fp8_chunk");
    std::vector<std::string> templateArgs;
    if (!fp4) templateArgs.push_back(preludeFormatName(op.getFormat()));
    templateArgs.push_back(boolName(op.getAligned()));
    SmallVector<Value> operands = {offsetPointer(rewriter, loc, adaptor.getSrc(), adaptor.getSrcOffset()),
                                   offsetPointer(rewriter, loc, adaptor.getDst(), adaptor.getDstOffset()),
                                   adaptor.getCount()};
    if (Value scale = adaptor.getScale()) {
      callee += scale.getType().isInteger(8) ? "_mx" : op.getMultiplies() ? "_multiplied" : "_scaled";
      operands.push_back(scale);
    }
    if (op.getChunk() != 8) return rewriter.notifyMatchFailure(op, "the prelude converts chunks of 8 elements");
    callPrelude(rewriter, loc, callee, {}, operands, templateArgs);
    rewriter.eraseOp(op);
    return success();
  }
  std::string verb;
};

struct CopyChunksPattern : OpConversionPattern<ep::LaneCopyChunksOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneCopyChunksOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    SmallVector<Value> operands = {adaptor.getSrc(), adaptor.getDst(), adaptor.getCount(), adaptor.getStart(),
                                   adaptor.getStride()};
    if (adaptor.getFlag()) operands.push_back(adaptor.getFlag());
    callPrelude(rewriter, op.getLoc(), adaptor.getFlag() ? "epjit::prim::copy_flagged_chunks" : "epjit::prim::copy_chunks",
                {}, operands, {std::to_string(op.getChunk()), std::to_string(op.getUnroll()), boolName(op.getAligned())});
    rewriter.eraseOp(op);
    return success();
  }
};

// A lane's chunks held across the body of a copy_row_around, and their stores.
struct HoldChunksPattern : OpConversionPattern<ep::LaneHoldChunksOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneHoldChunksOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    Type held = getTypeConverter()->convertType(op.getHeld().getType());
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::prim::hold_chunks", held,
                                       {adaptor.getSrc(), adaptor.getCount(), adaptor.getStart(), adaptor.getStride()},
                                       {std::to_string(op.getChunk()), std::to_string(op.getHeld().getType().getUnroll()),
                                        boolName(op.getAligned())}));
    return success();
  }
};

struct PutChunksPattern : OpConversionPattern<ep::LanePutChunksOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LanePutChunksOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    SmallVector<Value> operands = {adaptor.getHeld(), adaptor.getSrc(), adaptor.getDst(), adaptor.getCount(),
                                   adaptor.getStart(), adaptor.getStride()};
    if (adaptor.getFlag()) operands.push_back(adaptor.getFlag());
    callPrelude(rewriter, op.getLoc(), adaptor.getFlag() ? "epjit::prim::put_flagged_chunks" : "epjit::prim::put_chunks",
                {}, operands,
                {std::to_string(op.getChunk()), std::to_string(op.getHeld().getType().getUnroll()),
                 boolName(op.getAligned())});
    rewriter.eraseOp(op);
    return success();
  }
};

struct AccumulateChunkPattern : OpConversionPattern<ep::LaneAccumulateChunkOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneAccumulateChunkOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    Location loc = op.getLoc();
    callPrelude(rewriter, loc, "epjit::prim::accumulate_chunk", {},
                {offsetPointer(rewriter, loc, adaptor.getSrc(), adaptor.getSrcOffset()),
                 offsetPointer(rewriter, loc, adaptor.getAcc(), adaptor.getAccOffset()), adaptor.getCount(),
                 adaptor.getWeight()},
                {std::to_string(op.getChunk()), boolName(op.getAligned())});
    rewriter.eraseOp(op);
    return success();
  }
};

// A multi-row sum's call: `operands` (where and how much), then each source
// as a RowSource (live flag, row at the range's first element, block
// scales); the callee is epjit::prim::`name` for bf16/f32 rows, the
// conversion method's `fp8Name` for fp8 codes. Template arguments: [format,]
// chunk, `extra`..., aligned.
template <typename SumOp, typename Adaptor>
LogicalResult emitSum(SumOp op, Adaptor adaptor, ConversionPatternRewriter& rewriter, SmallVector<Value> operands,
                      StringRef name, StringRef fp8Name, ArrayRef<std::string> extra) {
  Location loc = op.getLoc();
  auto rowType = cast<emitc::PointerType>(adaptor.getRows().front().getType());
  const std::string element = cTypeName(rowType.getPointee());
  const bool scaled = !adaptor.getScales().empty();
  const bool weighted = !adaptor.getWeights().empty();
  auto sourceType = emitc::OpaqueType::get(
      rewriter.getContext(), scaled     ? "epjit::prim::ScaledCodes"
                             : weighted ? "epjit::prim::WeightedRow<" + element + ">"
                                        : "epjit::prim::RowSource<" + element + ">");
  for (size_t k = 0; k < adaptor.getRows().size(); ++k) {
    SmallVector<Value> parts = {adaptor.getValid()[k], adaptor.getRows()[k]};
    if (scaled) parts.push_back(adaptor.getScales()[k]);
    if (weighted) parts.push_back(adaptor.getWeights()[k]);
    operands.push_back(callPrelude(rewriter, loc, weighted ? "epjit::prim::weighted_source" : "epjit::prim::row_source",
                                   sourceType, parts));
  }
  std::string callee = ("epjit::prim::" + name).str();
  std::vector<std::string> templateArgs;
  if (auto format = op.getFormatAttr()) {
    if (!op.getMethod()) return rewriter.notifyMatchFailure(op, "fp8 sources need a conversion method");
    callee = preludeNamespace(*op.getMethod()) + "::" + fp8Name.str();
    templateArgs.push_back(preludeFormatName(format));
  }
  templateArgs.push_back(std::to_string(op.getChunk()));
  templateArgs.insert(templateArgs.end(), extra.begin(), extra.end());
  templateArgs.push_back(boolName(op.getAligned()));
  callPrelude(rewriter, loc, callee, {}, operands, templateArgs);
  rewriter.eraseOp(op);
  return success();
}

// One lane's chunk: sum_chunk / sum_fp8_chunk (dst at the chunk, its element count, its start).
struct SumChunkPattern : OpConversionPattern<ep::LaneSumChunkOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneSumChunkOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    SmallVector<Value> operands = {offsetPointer(rewriter, op.getLoc(), adaptor.getDst(), adaptor.getStart()),
                                   adaptor.getCount(), adaptor.getStart()};
    return emitSum(op, adaptor, rewriter, operands, "sum_chunk", "sum_fp8_chunk", {});
  }
};

// Flagged sources (ep.lane.sum_chunks ... flagged): each row becomes a
// FlaggedRow, the wait a LineWait, then epjit::prim::sum_flagged_chunks.
LogicalResult emitFlaggedSum(ep::LaneSumChunksOp op, ep::LaneSumChunksOp::Adaptor adaptor,
                             ConversionPatternRewriter& rewriter) {
  Location loc = op.getLoc();
  auto rowType = cast<emitc::PointerType>(adaptor.getRows().front().getType());
  auto sourceType = emitc::OpaqueType::get(rewriter.getContext(),
                                           "epjit::prim::FlaggedRow<" + cTypeName(rowType.getPointee()) + ">");
  auto waitType = emitc::OpaqueType::get(rewriter.getContext(), "epjit::prim::LineWait");
  Value error = offsetPointer(rewriter, loc, adaptor.getError(), adaptor.getErrorIndex());
  SmallVector<Value> operands = {
      adaptor.getDst(), adaptor.getCount(), adaptor.getStart(), adaptor.getStride(),
      callPrelude(rewriter, loc, "epjit::prim::line_wait", waitType,
                  {adaptor.getFlag(), error, adaptor.getCode(), adaptor.getTimeoutMs()})};
  for (size_t k = 0; k < adaptor.getRows().size(); ++k) {
    SmallVector<Value> parts = {adaptor.getValid()[k], adaptor.getRows()[k]};
    if (!adaptor.getUnflagged().empty()) parts.push_back(adaptor.getUnflagged()[k]);
    operands.push_back(callPrelude(rewriter, loc, "epjit::prim::flagged_source", sourceType, parts));
  }
  callPrelude(rewriter, loc, "epjit::prim::sum_flagged_chunks", {}, operands,
              {std::to_string(op.getChunk()), std::to_string(op.getUnroll()), boolName(op.getAligned())});
  rewriter.eraseOp(op);
  return success();
}

// One lane's `unroll` chunks: sum_chunks / sum_fp8_chunks (dst at the range,
// its element count, the first chunk's start, the stride between chunks).
struct SumChunksPattern : OpConversionPattern<ep::LaneSumChunksOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneSumChunksOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    if (op.getFlag()) return emitFlaggedSum(op, adaptor, rewriter);
    SmallVector<Value> operands = {adaptor.getDst(), adaptor.getCount(), adaptor.getStart(), adaptor.getStride()};
    return emitSum(op, adaptor, rewriter, operands, "sum_chunks", "sum_fp8_chunks",
                   {std::to_string(op.getUnroll())});
  }
};

// One lane's chunks of a row to several rows: each destination becomes a
// RowDest (live flag, row), then epjit::prim::fanout_chunks.
struct FanoutChunksPattern : OpConversionPattern<ep::LaneFanoutChunksOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneFanoutChunksOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    Location loc = op.getLoc();
    auto rowType = cast<emitc::PointerType>(adaptor.getSrc().getType());
    auto destType = emitc::OpaqueType::get(getContext(),
                                           "epjit::prim::RowDest<" + cTypeName(rowType.getPointee()) + ">");
    SmallVector<Value> operands = {adaptor.getSrc(), adaptor.getCount(), adaptor.getStart(), adaptor.getStride()};
    for (size_t k = 0; k < adaptor.getRows().size(); ++k)
      operands.push_back(callPrelude(rewriter, loc, "epjit::prim::row_dest", destType,
                                     {adaptor.getLive()[k], adaptor.getRows()[k]}));
    callPrelude(rewriter, loc, "epjit::prim::fanout_chunks", {}, operands,
                {std::to_string(op.getChunk()), std::to_string(op.getUnroll()), boolName(op.getAligned())});
    rewriter.eraseOp(op);
    return success();
  }
};

struct ChunkReducePattern : OpConversionPattern<ep::LaneChunkReduceOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneChunkReduceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    Location loc = op.getLoc();
    rewriter.replaceOp(op, callPrelude(rewriter, loc, "epjit::prim::chunk_reduce", rewriter.getF32Type(),
                                       {offsetPointer(rewriter, loc, adaptor.getSrc(), adaptor.getOffset()),
                                        adaptor.getCount()},
                                       {preludeName(op.getKind()), std::to_string(op.getChunk())}));
    return success();
  }
};

struct LaneReducePattern : OpConversionPattern<ep::LaneReduceOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneReduceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::lane_reduce", rewriter.getF32Type(),
                                       {adaptor.getValue()},
                                       {preludeName(op.getKind()), std::to_string(op.getGroup())}));
    return success();
  }
};

struct LaneCombinePattern : OpConversionPattern<ep::LaneCombineOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::LaneCombineOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::combine", rewriter.getF32Type(),
                                       {adaptor.getLhs(), adaptor.getRhs()}, {preludeName(op.getKind())}));
    return success();
  }
};

struct ReduceIdentityPattern : OpConversionPattern<ep::ReduceIdentityOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::ReduceIdentityOp op, OpAdaptor, ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::reduce_identity", rewriter.getF32Type(), {},
                                       {preludeName(op.getKind())}));
    return success();
  }
};

struct MxScalePattern : OpConversionPattern<ep::MxScaleOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::MxScaleOp op, OpAdaptor adaptor, ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::mx_scale_byte", rewriter.getI8Type(),
                                       {adaptor.getAmax()}, {preludeMxElement(op.getFormat())}));
    return success();
  }
};

struct BlockwiseScalePattern : OpConversionPattern<ep::BlockwiseScaleOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::BlockwiseScaleOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    rewriter.replaceOp(op, callPrelude(rewriter, op.getLoc(), "epjit::blockwise_scale", rewriter.getF32Type(),
                                       {adaptor.getAmax()}, {preludeFormatName(op.getFormatAttr())}));
    return success();
  }
};

// Two prelude calls: the stored scale, and the factor the elements are multiplied by.
struct DeepEpScalePattern : OpConversionPattern<ep::DeepEpScaleOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ep::DeepEpScaleOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter& rewriter) const override {
    const bool byte = op.getScale() == ep::ScaleKind::deepep_ue8m0;
    const std::string round = boolName(op.getScale() != ep::ScaleKind::deepep);
    Value stored = byte ? callPrelude(rewriter, op.getLoc(), "epjit::deepep_ue8m0_scale", rewriter.getI8Type(),
                                      {adaptor.getAmax()}, {})
                        : callPrelude(rewriter, op.getLoc(), "epjit::deepep_scale_inv", rewriter.getF32Type(),
                                      {adaptor.getAmax()}, {round});
    Value factor = callPrelude(rewriter, op.getLoc(), "epjit::deepep_factor", rewriter.getF32Type(),
                               {adaptor.getAmax()}, {round});
    rewriter.replaceOp(op, {stored, factor});
    return success();
  }
};

}  // namespace

void populateLanePatterns(TypeConverter& converter, RewritePatternSet& patterns) {
  MLIRContext* context = patterns.getContext();
  patterns.add<ChunkConvertPattern<ep::LaneQuantizeChunkOp>>(converter, context, "quantize");
  patterns.add<ChunkConvertPattern<ep::LaneDequantizeChunkOp>>(converter, context, "dequantize");
  patterns.add<CopyChunksPattern, HoldChunksPattern, PutChunksPattern, AccumulateChunkPattern, SumChunkPattern,
               SumChunksPattern, FanoutChunksPattern, ChunkReducePattern, LaneReducePattern, LaneCombinePattern,
               ReduceIdentityPattern, MxScalePattern, BlockwiseScalePattern, DeepEpScalePattern>(converter, context);
}

}  // namespace epjit::to_emitc
