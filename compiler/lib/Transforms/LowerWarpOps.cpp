// ep-lower-warp-ops: distribute each warp operation over the lanes of a warp.
//
// Work is cut into chunks of 16 bytes of the row's element type (8 elements
// for quantize/dequantize, whose fp4 side packs a chunk into one dword). On a
// SIMT target lane `i` takes chunks i, i + wave, ...; scale blocks of B
// elements are handled by aligned groups of B/8 lanes that reduce their amax
// with a butterfly. On the host target the same lane structure runs as loops
// in one thread and reductions are combined in the same order, so results
// agree bit for bit with the GPU target of the same wave width.
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include "epjit/Compiler/Passes.h"
#include "epjit/Compiler/Target.h"
#include "epjit/Dialect/Ep/EpOps.h"

namespace epjit {
#define GEN_PASS_DEF_EPLOWERWARPOPS
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

// Elements per lane chunk of quantize/dequantize: one 16-byte bf16 load, one
// fp4 dword, two fp8 dwords.
constexpr int64_t kConvertChunk = 8;


// True when `value` is provably a multiple of `m` (constants, products with a
// multiple, sums and differences of multiples), which makes chunk accesses
// 16-byte aligned given 16-byte aligned base pointers (the kernel argument
// contract). Differences matter because canonicalization writes
// (x ^ 1) * c as c - x * c.
bool isKnownMultipleOf(Value value, int64_t m) {
  if (m <= 1) return true;
  if (auto constant = value.getDefiningOp<arith::ConstantOp>()) {
    if (auto integer = dyn_cast<IntegerAttr>(constant.getValue())) return integer.getInt() % m == 0;
    return false;
  }
  if (auto mul = value.getDefiningOp<arith::MulIOp>())
    return isKnownMultipleOf(mul.getLhs(), m) || isKnownMultipleOf(mul.getRhs(), m);
  if (auto add = value.getDefiningOp<arith::AddIOp>())
    return isKnownMultipleOf(add.getLhs(), m) && isKnownMultipleOf(add.getRhs(), m);
  if (auto sub = value.getDefiningOp<arith::SubIOp>())
    return isKnownMultipleOf(sub.getLhs(), m) && isKnownMultipleOf(sub.getRhs(), m);
  // The induction variable of a loop whose start and step are multiples.
  if (auto loop = scf::getForInductionVarOwner(value))
    return isKnownMultipleOf(loop.getLowerBound(), m) && isKnownMultipleOf(loop.getStep(), m);
  return false;
}

// True when `ptr` is known to point at a multiple of `elements` elements from
// a 16-byte aligned base: a window region (256-byte aligned) at such an
// offset, a pointer advanced by such an offset, or a function's pointer
// argument (every pointer that crosses a function boundary is a 16-byte
// aligned row start: the kernel argument contract).
bool isKnownAlignedPointer(Value ptr, int64_t elements) {
  if (isa<BlockArgument>(ptr)) return true;
  if (auto peer = ptr.getDefiningOp<ep::PeerPtrOp>()) return isKnownMultipleOf(peer.getOffset(), elements);
  if (auto add = ptr.getDefiningOp<ep::PtrAddOp>())
    return isKnownAlignedPointer(add.getBase(), elements) && isKnownMultipleOf(add.getOffset(), elements);
  if (auto select = ptr.getDefiningOp<arith::SelectOp>())
    return isKnownAlignedPointer(select.getTrueValue(), elements) &&
           isKnownAlignedPointer(select.getFalseValue(), elements);
  return false;
}

// An access of whole `elements`-element chunks at ptr[offset + k * elements] is 16-byte aligned.
bool isAlignedAccess(Value ptr, Value offset, int64_t elements) {
  return isKnownAlignedPointer(ptr, elements) && isKnownMultipleOf(offset, elements);
}

// Index arithmetic and the small control structures the lowerings share.
struct Lowering {
  ImplicitLocOpBuilder& b;
  const TargetInfo& target;

  bool simt() const { return target.is_simt(); }
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value f32(float v) { return arith::ConstantOp::create(b, b.getF32FloatAttr(v)); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value mul(Value x, int64_t y) { return y == 1 ? x : arith::MulIOp::create(b, x, index(y)).getResult(); }
  Value div(Value x, int64_t y) { return y == 1 ? x : arith::DivUIOp::create(b, x, index(y)).getResult(); }
  Value rem(Value x, int64_t y) { return arith::RemUIOp::create(b, x, index(y)); }
  Value ceilDiv(Value x, int64_t y) { return div(add(x, index(y - 1)), y); }
  Value less(Value x, Value y) { return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, x, y); }

  // Elements of a chunk starting at `start` that lie below `count` (0..chunk).
  Value chunkCount(Value start, Value count, int64_t chunk) {
    Value left = arith::SubIOp::create(b, count, start);  // only used when start < count
    Value full = index(chunk);
    Value partial = arith::SelectOp::create(b, less(left, full), left, full);
    return arith::SelectOp::create(b, less(start, count), partial, index(0));
  }

  // for (iv = lower; iv < upper; iv += step) body(iv)
  void loop(Value lower, Value upper, int64_t step, llvm::function_ref<void(Value)> body) {
    scf::ForOp::create(b, lower, upper, index(step), ValueRange{},
                       [&](OpBuilder& nested, Location, Value iv, ValueRange) {
                         OpBuilder::InsertionGuard guard(b);
                         b.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
                         body(iv);
                         scf::YieldOp::create(b);
                       });
  }

  // acc = init; for (iv ...) acc = body(iv, acc); return acc
  Value fold(Value lower, Value upper, int64_t step, Value init, llvm::function_ref<Value(Value, Value)> body) {
    auto loop = scf::ForOp::create(b, lower, upper, index(step), ValueRange{init},
                                   [&](OpBuilder& nested, Location, Value iv, ValueRange args) {
                                     OpBuilder::InsertionGuard guard(b);
                                     b.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
                                     Value next = body(iv, args.front());
                                     scf::YieldOp::create(b, next);
                                   });
    return loop.getResult(0);
  }

  void when(Value condition, llvm::function_ref<void()> body) {
    scf::IfOp::create(b, condition, [&](OpBuilder& nested, Location) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
      body();
      scf::YieldOp::create(b);
    });
  }

  // condition ? then() : otherwise
  Value select(Value condition, Type type, llvm::function_ref<Value()> then, Value otherwise) {
    auto op = scf::IfOp::create(b, TypeRange{type}, condition, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&op.getThenRegion().front());
      scf::YieldOp::create(b, then());
      b.setInsertionPointToStart(&op.getElseRegion().front());
      scf::YieldOp::create(b, otherwise);
    }
    return op.getResult(0);
  }

  Value identity(ep::ReduceKind kind) { return ep::ReduceIdentityOp::create(b, b.getF32Type(), kind); }
  Value combine(ep::ReduceKind kind, Value x, Value y) {
    return ep::LaneCombineOp::create(b, b.getF32Type(), kind, x, y);
  }
};

// ------------------------------------------------------------ quantize / dequantize

template <typename OpT>
struct ConversionShape {
  Value values, valuesOffset;  // the bf16/f32 side
  Value codes, codesOffset;    // the fp8/fp4 byte side
  bool fp4;
  int64_t block;               // elements per scale block, or the chunk for a direct cast
  bool scaled;
};

template <typename OpT>
ConversionShape<OpT> shapeOf(OpT op, bool quantize) {
  ConversionShape<OpT> s;
  s.values = quantize ? op.getSrc() : op.getDst();
  s.valuesOffset = quantize ? op.getSrcOffset() : op.getDstOffset();
  s.codes = quantize ? op.getDst() : op.getSrc();
  s.codesOffset = quantize ? op.getDstOffset() : op.getSrcOffset();
  s.fp4 = isa<ep::Fp4KindAttr>(op.getFormat());
  s.scaled = op.getBlock().has_value();
  s.block = s.scaled ? op.getBlockSize() : kConvertChunk;
  return s;
}

// One lane's share of a scale block: converts chunk `sub` of block `blockIndex`.
template <typename OpT>
struct ConversionLowering {
  Lowering& l;
  OpT op;
  bool quantize;
  ConversionShape<OpT> shape;
  bool aligned;

  int64_t lanesPerBlock() const { return shape.block / kConvertChunk; }

  Value elementStart(Value blockIndex, Value sub) {
    return l.add(l.mul(blockIndex, shape.block), l.mul(sub, kConvertChunk));
  }
  Value codeOffset(Value start) { return l.add(shape.codesOffset, shape.fp4 ? l.div(start, 2) : start); }

  bool deepEp() { return op.getScale() && ep::isDeepEpScale(*op.getScale()); }

  Value chunkAmax(Value blockIndex, Value sub) {
    Value start = elementStart(blockIndex, sub);
    Value n = l.chunkCount(start, op.getCount(), kConvertChunk);
    // DeepEP's amax is fmaxf's: a NaN element is ignored (its code is NaN).
    const ep::ReduceKind kind = deepEp() ? ep::ReduceKind::absmaxnum : ep::ReduceKind::absmax;
    return ep::LaneChunkReduceOp::create(l.b, l.b.getF32Type(), ep::ReduceKindAttr::get(l.b.getContext(), kind),
                                         shape.values, l.add(shape.valuesOffset, start), n,
                                         l.b.getI64IntegerAttr(kConvertChunk));
  }

  // What a block's conversion uses (`applied`: the divisor, or DeepEP's
  // factor) and what it stores (`stored`).
  struct BlockScale {
    Value stored, applied;
  };
  BlockScale scaleFromAmax(Value amax) {
    if (deepEp()) {
      auto scale = ep::DeepEpScaleOp::create(l.b, scaleType(), l.b.getF32Type(), amax, *op.getScale());
      return {scale.getStored(), scale.getFactor()};
    }
    Value scale = op.getScale() == ep::ScaleKind::e8m0
                      ? Value(ep::MxScaleOp::create(l.b, l.b.getI8Type(), amax, op.getFormat()))
                      : Value(ep::BlockwiseScaleOp::create(l.b, l.b.getF32Type(), amax,
                                                           cast<ep::Fp8KindAttr>(op.getFormat())));
    return {scale, scale};
  }

  void convertChunk(Value blockIndex, Value sub, Value scale) {
    Value start = elementStart(blockIndex, sub);
    Value n = l.chunkCount(start, op.getCount(), kConvertChunk);
    Value valueAt = l.add(shape.valuesOffset, start);
    Value codeAt = codeOffset(start);
    auto method = op.getMethodAttr();
    auto chunk = l.b.getI64IntegerAttr(kConvertChunk);
    auto isAligned = l.b.getBoolAttr(aligned);
    if (quantize) {
      ep::LaneQuantizeChunkOp::create(l.b, shape.values, valueAt, shape.codes, codeAt, n, scale, op.getFormat(),
                                      method, chunk, isAligned, deepEp() ? l.b.getUnitAttr() : UnitAttr());
    } else {
      ep::LaneDequantizeChunkOp::create(l.b, shape.codes, codeAt, shape.values, valueAt, n, scale, op.getFormat(),
                                        method, chunk, isAligned, UnitAttr());
    }
  }

  // Block b's scale: scales_offset + b, or in groups of scales_group blocks
  // one scales_stride apart.
  Value scaleAt(Value blockIndex) {
    Value stride = op.getScalesStride();
    if (!stride) return l.add(op.getScalesOffset(), blockIndex);
    const int64_t group = op.getScalesGroup() ? *op.getScalesGroup() : 1;
    Value groupStart = arith::MulIOp::create(l.b, l.div(blockIndex, group), stride);
    if (group == 1) return l.add(op.getScalesOffset(), groupStart);
    return l.add(op.getScalesOffset(), l.add(groupStart, l.rem(blockIndex, group)));
  }
  void storeScale(Value blockIndex, Value scale) { ep::StoreOp::create(l.b, scale, op.getScales(), scaleAt(blockIndex)); }
  Value loadScale(Value blockIndex) {
    // Each lane group loads its own block's scale: a per-lane load.
    return ep::LaneLoadOp::create(l.b, scaleType(), op.getScales(), scaleAt(blockIndex));
  }
  Type scaleType() {
    const bool byte = op.getScale() == ep::ScaleKind::e8m0 || op.getScale() == ep::ScaleKind::deepep_ue8m0;
    return byte ? Type(l.b.getI8Type()) : Type(l.b.getF32Type());
  }
  Value zeroScale() {
    if (op.getScale() == ep::ScaleKind::e8m0) return arith::ConstantOp::create(l.b, l.b.getI8IntegerAttr(0));
    return l.f32(1.0f);
  }

  void lower() {
    const int64_t lanes = lanesPerBlock();
    const int64_t blocksPerPass = l.target.wave_size / lanes;
    Value blocks = l.ceilDiv(op.getCount(), shape.block);
    Value zero = l.index(0);
    if (l.simt()) {
      Value lane = ep::LaneIdOp::create(l.b, l.b.getIndexType());
      Value group = l.div(lane, lanes);
      Value sub = l.rem(lane, lanes);
      l.loop(zero, blocks, blocksPerPass, [&](Value firstBlock) {
        Value blockIndex = l.add(firstBlock, group);
        Value scale = simtScale(blockIndex, sub, blocks);
        convertChunk(blockIndex, sub, scale);
      });
      return;
    }
    l.loop(zero, blocks, blocksPerPass, [&](Value firstBlock) {
      l.loop(zero, l.index(blocksPerPass), 1, [&](Value group) {
        Value blockIndex = l.add(firstBlock, group);
        l.when(l.less(blockIndex, blocks), [&] {
          Value scale = lanesScale(blockIndex);
          l.loop(zero, l.index(lanes), 1, [&](Value sub) { convertChunk(blockIndex, sub, scale); });
        });
      });
    });
  }

  // SIMT: every lane of the group computes the block's scale; lane 0 of the
  // group stores it (quantize) or every lane loads it (dequantize).
  Value simtScale(Value blockIndex, Value sub, Value blocks) {
    if (!shape.scaled) return Value();
    Value live = l.less(blockIndex, blocks);
    if (!quantize) return l.select(live, scaleType(), [&] { return loadScale(blockIndex); }, zeroScale());
    // The lanes' partials are absolute values (NaN only under absmax, which
    // max propagates as it should).
    Value amax = ep::LaneReduceOp::create(l.b, l.b.getF32Type(), ep::ReduceKind::max,
                                          chunkAmax(blockIndex, sub), uint64_t(lanesPerBlock()));
    BlockScale scale = scaleFromAmax(amax);
    Value first = arith::CmpIOp::create(l.b, arith::CmpIPredicate::eq, sub, l.index(0));
    l.when(arith::AndIOp::create(l.b, first, live), [&] { storeScale(blockIndex, scale.stored); });
    return scale.applied;
  }

  // Lanes: the group's lanes combine their partial amax in lane order.
  Value lanesScale(Value blockIndex) {
    if (!shape.scaled) return Value();
    if (!quantize) return loadScale(blockIndex);
    Value amax = l.fold(l.index(0), l.index(lanesPerBlock()), 1, l.f32(0.0f), [&](Value sub, Value acc) {
      return l.combine(ep::ReduceKind::max, acc, chunkAmax(blockIndex, sub));
    });
    BlockScale scale = scaleFromAmax(amax);
    storeScale(blockIndex, scale.stored);
    return scale.applied;
  }
};

template <typename OpT>
void lowerConversion(OpT op, Lowering& l, bool quantize) {
  ConversionShape<OpT> shape = shapeOf(op, quantize);
  const bool aligned = isAlignedAccess(shape.values, shape.valuesOffset, kConvertChunk) &&
                       isAlignedAccess(shape.codes, shape.codesOffset, shape.fp4 ? kConvertChunk / 2 : kConvertChunk);
  ConversionLowering<OpT>{l, op, quantize, shape, aligned}.lower();
}

// ------------------------------------------------------------ row copy, accumulate

// Chunks of 16 bytes of the source element type, lane i taking chunks i, i+wave, ...
void forEachLaneChunk(Lowering& l, Value count, int64_t chunk, llvm::function_ref<void(Value start, Value n)> body) {
  const int64_t wave = l.target.wave_size;
  Value chunks = l.ceilDiv(count, chunk);
  Value zero = l.index(0);
  auto atChunk = [&](Value chunkIndex) {
    Value start = l.mul(chunkIndex, chunk);
    body(start, l.chunkCount(start, count, chunk));
  };
  if (l.simt()) {
    Value lane = ep::LaneIdOp::create(l.b, l.b.getIndexType());
    l.loop(zero, chunks, wave, [&](Value first) { atChunk(l.add(first, lane)); });
    return;
  }
  l.loop(zero, chunks, wave, [&](Value first) {
    l.loop(zero, l.index(wave), 1, [&](Value lane) {
      Value chunkIndex = l.add(first, lane);
      l.when(l.less(chunkIndex, chunks), [&] { atChunk(chunkIndex); });
    });
  });
}

int64_t rowChunk(Value src) { return 16 / ep::elementBytes(ep::elementTypeOf(src)); }

// Steps of `wave * unroll` chunks: `at(first + lane)` for each lane, the lane
// then taking chunks first + lane + u * wave (u < unroll) itself. SIMT lanes
// run their own; the host walks the lanes of a step in order.
// `from` (a multiple of wave * unroll) skips the steps before it.
void forEachLaneStep(Lowering& l, Value chunks, int64_t unroll, llvm::function_ref<void(Value chunkIndex)> at,
                     int64_t from = 0) {
  const int64_t wave = l.target.wave_size;
  Value zero = l.index(0);
  if (l.simt()) {
    Value lane = ep::LaneIdOp::create(l.b, l.b.getIndexType());
    l.loop(l.index(from), chunks, wave * unroll, [&](Value first) { at(l.add(first, lane)); });
    return;
  }
  l.loop(l.index(from), chunks, wave * unroll, [&](Value first) {
    l.loop(zero, l.index(wave), 1, [&](Value lane) { at(l.add(first, lane)); });
  });
}

// Steps of ep.lane.copy_chunks over a row's chunks from chunk `from` on
// (into a flagged row with `flag`).
void copyChunkSteps(Lowering& l, Value src, Value dst, Value count, int64_t chunk, int64_t unroll, bool aligned,
                    int64_t from = 0, Value flag = Value()) {
  Value stride = l.index(l.target.wave_size * chunk);
  forEachLaneStep(
      l, l.ceilDiv(count, chunk), unroll,
      [&](Value chunkIndex) {
        ep::LaneCopyChunksOp::create(l.b, src, dst, count, l.mul(chunkIndex, chunk), stride, flag,
                                     l.b.getI64IntegerAttr(chunk), l.b.getI64IntegerAttr(unroll),
                                     l.b.getBoolAttr(aligned));
      },
      from);
}

// A copy keeps `copy_loads_in_flight` chunks per lane in flight: lane i of
// a step takes chunks first + i + k * wave (k < unroll), all loaded before
// any is stored. The host target walks the same chunks lane by lane.
//
// A flagged copy's lines are 16-byte accesses, so its destination must be
// known to be aligned; its `aligned` speaks of the source alone.
LogicalResult lowerCopy(ep::WarpCopyRowOp op, Lowering& l) {
  const int64_t chunk = rowChunk(op.getSrc());
  const int64_t unroll = std::max(1, l.target.copy_loads_in_flight);
  const bool srcAligned = isAlignedAccess(op.getSrc(), op.getSrcOffset(), chunk);
  const bool dstAligned = isAlignedAccess(op.getDst(), op.getDstOffset(), chunk);
  if (op.getFlag() && !dstAligned)
    return op.emitError() << "a flagged row must start on a 16-byte boundary the compiler can prove: an offset that "
                             "is a multiple of "
                          << chunk << " elements from a window region or a pointer argument";
  Value src = ep::PtrAddOp::create(l.b, op.getSrc().getType(), op.getSrc(), op.getSrcOffset());
  Value dst = ep::PtrAddOp::create(l.b, op.getDst().getType(), op.getDst(), op.getDstOffset());
  // Narrowed ids (i64 -> i32) go element by element, so no alignment is
  // asked of them: a framework's view of its top-k may start mid-line.
  const bool narrowing = ep::elementTypeOf(op.getSrc()).isInteger(64) && ep::elementTypeOf(op.getDst()).isInteger(32);
  const bool aligned = !narrowing && (op.getFlag() ? srcAligned : srcAligned && dstAligned);
  copyChunkSteps(l, src, dst, op.getCount(), chunk, unroll, aligned, /*from=*/0, op.getFlag());
  return success();
}

// A SIMT lane loads its first copy_loads_in_flight chunks (the first step of
// a plain copy) into registers, the body runs once, and then, if the
// destination is live, the lane stores them and copies the row's remaining
// steps. The host has no latency to hide: the body, then a plain copy.
LogicalResult lowerCopyAround(ep::WarpCopyRowAroundOp op, Lowering& l) {
  const int64_t chunk = rowChunk(op.getSrc());
  const int64_t wave = l.target.wave_size;
  const int64_t unroll = std::max(1, l.target.copy_loads_in_flight);
  const bool srcAligned = isAlignedAccess(op.getSrc(), op.getSrcOffset(), chunk);
  Value src = ep::PtrAddOp::create(l.b, op.getSrc().getType(), op.getSrc(), op.getSrcOffset());
  Value count = op.getCount();
  Value stride = l.index(wave * chunk);
  Value start, held;
  if (l.simt()) {
    start = l.mul(ep::LaneIdOp::create(l.b, l.b.getIndexType()), chunk);
    held = ep::LaneHoldChunksOp::create(l.b, ep::HeldChunksType::get(l.b.getContext(), unroll), src, count, start,
                                        stride, l.b.getI64IntegerAttr(chunk), l.b.getBoolAttr(srcAligned));
  }
  IRMapping mapping;
  for (Operation& inner : op.getBody().front().without_terminator()) l.b.clone(inner, mapping);
  ep::CopyToOp copyTo = op.getCopyTo();
  Value row = mapping.lookupOrDefault(copyTo.getRow());
  Value flag = copyTo.getFlag() ? mapping.lookupOrDefault(copyTo.getFlag()) : Value();
  // put_chunks reads the source for what hold_chunks did not load, so an
  // unaligned source stays unaligned here whatever the destination. A
  // flagged destination must be aligned; `aligned` then speaks of the source.
  const bool rowAligned = isKnownAlignedPointer(row, chunk);
  if (flag && !rowAligned)
    return copyTo.emitError() << "a flagged row must start on a 16-byte boundary the compiler can prove";
  const bool aligned = srcAligned && (flag || rowAligned);
  l.when(mapping.lookupOrDefault(copyTo.getLive()), [&] {
    if (!l.simt()) return copyChunkSteps(l, src, row, count, chunk, unroll, aligned, /*from=*/0, flag);
    ep::LanePutChunksOp::create(l.b, held, src, row, count, start, stride, flag, l.b.getI64IntegerAttr(chunk),
                                l.b.getBoolAttr(aligned));
    copyChunkSteps(l, src, row, count, chunk, unroll, aligned, /*from=*/wave * unroll, flag);
  });
  for (auto [result, value] : llvm::zip_equal(op.getResults(), copyTo.getValues()))
    result.replaceAllUsesWith(mapping.lookupOrDefault(value));
  return success();
}

void lowerAccumulate(ep::WarpAccumulateOp op, Lowering& l) {
  const int64_t chunk = rowChunk(op.getSrc());
  const bool aligned =
      isAlignedAccess(op.getSrc(), op.getSrcOffset(), chunk) && isAlignedAccess(op.getAcc(), op.getAccOffset(), chunk);
  Value weight = op.getWeight() ? op.getWeight() : l.f32(1.0f);
  forEachLaneChunk(l, op.getCount(), chunk, [&](Value start, Value n) {
    ep::LaneAccumulateChunkOp::create(l.b, op.getSrc(), l.add(op.getSrcOffset(), start), op.getAcc(),
                                      l.add(op.getAccOffset(), start), n, weight, l.b.getI64IntegerAttr(chunk),
                                      l.b.getBoolAttr(aligned));
  });
}

// ------------------------------------------------------------ multi-row sum

// A per-row body (sum_rows' sources, fanout_row's destinations) cloned once
// for each of `count` rows, its number a constant; `take` reads the clone's
// terminator operands through the mapping. Every row is then known before
// the lanes touch memory.
template <typename Terminator>
void cloneBodyPerRow(Lowering& l, Block& body, int64_t count, llvm::function_ref<void(Terminator, IRMapping&)> take) {
  for (int64_t j = 0; j < count; ++j) {
    IRMapping mapping;
    mapping.map(body.getArgument(0), l.index(j));
    for (Operation& inner : body.without_terminator()) l.b.clone(inner, mapping);
    take(cast<Terminator>(body.getTerminator()), mapping);
  }
}

LogicalResult lowerSumRows(ep::WarpSumRowsOp op, Lowering& l) {
  std::optional<int64_t> sources = getConstantIntValue(op.getSources());
  if (!sources || *sources < 1 || *sources > 64)
    return op.emitError() << "ep.warp.sum_rows needs a constant count of 1 to 64 sources once specialized";
  SmallVector<Value> valid, rows, scales, unflagged, weights;
  cloneBodyPerRow<ep::SourceOp>(l, op.getBody().front(), *sources, [&](ep::SourceOp source, IRMapping& mapping) {
    valid.push_back(mapping.lookupOrDefault(source.getValid()));
    rows.push_back(mapping.lookupOrDefault(source.getRow()));
    if (source.getScales()) scales.push_back(mapping.lookupOrDefault(source.getScales()));
    if (source.getUnflagged()) unflagged.push_back(mapping.lookupOrDefault(source.getUnflagged()));
    if (source.getWeight()) weights.push_back(mapping.lookupOrDefault(source.getWeight()));
  });
  // A lane chunk is 16 bytes of each source (8 bf16, 4 f32, 16 fp8 codes):
  // one vector load per source, and vector stores of the sum, when the
  // destination and every row are known to start on a 16-byte boundary.
  const int64_t chunk = 16 / ep::elementBytes(ep::elementTypeOf(rows.front()));
  bool aligned = isAlignedAccess(op.getDst(), op.getDstOffset(), chunk);
  for (Value row : rows) aligned = aligned && isKnownAlignedPointer(row, chunk);
  Value dst = ep::PtrAddOp::create(l.b, op.getDst().getType(), op.getDst(), op.getDstOffset());
  // With few sources (a gather combine at EP2 has two) a lane takes `unroll`
  // chunks at a time (lane i of a step: chunks first + i + u * wave), all of
  // their loads issued before the first add, up to the target's
  // copy_loads_in_flight; when the sources alone fill it, one chunk.
  const int64_t wave = l.target.wave_size;
  // fp8 chunks are 16 elements (two bf16 chunks' worth of f32 sums): at most
  // two at a time, or the sums spill (EP2 fp8 scatter on sm90 spilled 72 to
  // 144 bytes at four).
  const int64_t most = op.getFormat() ? 2 : l.target.copy_loads_in_flight;
  if (op.getFlag()) {
    // Flagged rows: two 16-byte lines per chunk, all of a lane's issued
    // before the first is awaited; lines in flight are counted as loads.
    for (Value row : rows)
      if (!isKnownAlignedPointer(row, chunk))
        return op.emitError() << "a flagged source must start on a 16-byte boundary the compiler can prove";
    const int64_t unroll = std::clamp<int64_t>(l.target.copy_loads_in_flight / (2 * *sources), 1, most);
    Value stride = l.index(wave * chunk);
    forEachLaneStep(l, l.ceilDiv(op.getCount(), chunk), unroll, [&](Value chunkIndex) {
      ep::LaneSumChunksOp::create(l.b, dst, l.mul(chunkIndex, chunk), op.getCount(), stride, valid, rows, scales,
                                  ValueRange{}, op.getFlag(), op.getError(), op.getErrorIndex(), op.getCode(), op.getTimeoutMs(),
                                  unflagged, nullptr, nullptr, nullptr, l.b.getI64IntegerAttr(chunk),
                                  l.b.getI64IntegerAttr(unroll), l.b.getBoolAttr(aligned));
    });
    return success();
  }
  const int64_t unroll = std::clamp<int64_t>(l.target.copy_loads_in_flight / *sources, 1, most);
  if (unroll == 1) {
    forEachLaneChunk(l, op.getCount(), chunk, [&](Value start, Value n) {
      ep::LaneSumChunkOp::create(l.b, dst, start, n, valid, rows, scales, weights, op.getFormatAttr(),
                                 op.getBlockAttr(),
                                 op.getMethodAttr(), l.b.getI64IntegerAttr(chunk), l.b.getBoolAttr(aligned));
    });
    return success();
  }
  Value stride = l.index(wave * chunk);
  forEachLaneStep(l, l.ceilDiv(op.getCount(), chunk), unroll, [&](Value chunkIndex) {
    ep::LaneSumChunksOp::create(l.b, dst, l.mul(chunkIndex, chunk), op.getCount(), stride, valid, rows, scales,
                                weights, Value(), Value(), Value(), Value(), Value(), ValueRange{}, op.getFormatAttr(),
                                op.getBlockAttr(), op.getMethodAttr(),
                                l.b.getI64IntegerAttr(chunk), l.b.getI64IntegerAttr(unroll), l.b.getBoolAttr(aligned));
  });
  return success();
}

// ------------------------------------------------------------ one row to several

// The body once per destination (its number a constant), then the copy: a
// lane loads copy_loads_in_flight chunks of the source, then stores each to
// every live destination.
LogicalResult lowerFanout(ep::WarpFanoutRowOp op, Lowering& l) {
  std::optional<int64_t> destinations = getConstantIntValue(op.getDestinations());
  if (!destinations || *destinations < 1 || *destinations > 64)
    return op.emitError() << "ep.warp.fanout_row needs a constant count of 1 to 64 destinations once specialized";
  SmallVector<Value> live, rows;
  cloneBodyPerRow<ep::DestinationOp>(l, op.getBody().front(), *destinations,
                                     [&](ep::DestinationOp destination, IRMapping& mapping) {
                                       live.push_back(mapping.lookupOrDefault(destination.getLive()));
                                       rows.push_back(mapping.lookupOrDefault(destination.getRow()));
                                     });
  const int64_t chunk = rowChunk(op.getSrc());
  bool aligned = isAlignedAccess(op.getSrc(), op.getSrcOffset(), chunk);
  for (Value row : rows) aligned = aligned && isKnownAlignedPointer(row, chunk);
  const int64_t unroll = std::max(1, l.target.copy_loads_in_flight);
  Value src = ep::PtrAddOp::create(l.b, op.getSrc().getType(), op.getSrc(), op.getSrcOffset());
  Value stride = l.index(l.target.wave_size * chunk);
  forEachLaneStep(l, l.ceilDiv(op.getCount(), chunk), unroll, [&](Value chunkIndex) {
    ep::LaneFanoutChunksOp::create(l.b, src, op.getCount(), l.mul(chunkIndex, chunk), stride, live, rows,
                                   l.b.getI64IntegerAttr(chunk), l.b.getI64IntegerAttr(unroll),
                                   l.b.getBoolAttr(aligned));
  });
  return success();
}

// ------------------------------------------------------------ row reduction

// One lane's partial: its chunks lane, lane + wave, ... combined in order.
Value lanePartial(ep::WarpReduceOp op, Lowering& l, Value lane, int64_t chunk) {
  const ep::ReduceKind kind = op.getKind();
  Value chunks = l.ceilDiv(op.getCount(), chunk);
  return l.fold(l.index(0), chunks, l.target.wave_size, l.identity(kind), [&](Value first, Value acc) {
    Value start = l.mul(l.add(first, lane), chunk);
    Value n = l.chunkCount(start, op.getCount(), chunk);
    Value partial = ep::LaneChunkReduceOp::create(l.b, l.b.getF32Type(), op.getKindAttr(), op.getSrc(),
                                                  l.add(op.getOffset(), start), n, l.b.getI64IntegerAttr(chunk));
    return l.combine(kind, acc, partial);
  });
}

Value lowerReduce(ep::WarpReduceOp op, Lowering& l) {
  const int64_t chunk = rowChunk(op.getSrc());
  const int64_t wave = l.target.wave_size;
  const ep::ReduceKind kind = op.getKind();
  if (l.simt()) {
    Value lane = ep::LaneIdOp::create(l.b, l.b.getIndexType());
    return ep::LaneReduceOp::create(l.b, l.b.getF32Type(), op.getKindAttr(), lanePartial(op, l, lane, chunk),
                                    l.b.getI64IntegerAttr(wave));
  }
  if (kind != ep::ReduceKind::sum) {
    // max is exact in any order: combine the lanes' partials in lane order.
    return l.fold(l.index(0), l.index(wave), 1, l.identity(kind), [&](Value lane, Value acc) {
      return l.combine(kind, acc, lanePartial(op, l, lane, chunk));
    });
  }
  // A float sum depends on order: replay the SIMT butterfly, in which every
  // lane ends with v[i] + v[i ^ h] for h = wave/2, ..., 1.
  std::vector<Value> values(static_cast<size_t>(wave));
  for (int64_t lane = 0; lane < wave; ++lane) values[lane] = lanePartial(op, l, l.index(lane), chunk);
  for (int64_t h = wave / 2; h >= 1; h /= 2) {
    std::vector<Value> next(static_cast<size_t>(wave));
    for (int64_t lane = 0; lane < wave; ++lane) next[lane] = l.combine(kind, values[lane], values[lane ^ h]);
    values = std::move(next);
  }
  return values[0];
}

struct EpLowerWarpOps : impl::EpLowerWarpOpsBase<EpLowerWarpOps> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const TargetInfo* target = requireModuleTarget(module, getArgument());
    if (!target) return signalPassFailure();

    SmallVector<Operation*> warpOps;
    module.walk([&](Operation* op) {
      if (isa<ep::WarpQuantizeOp, ep::WarpDequantizeOp, ep::WarpCopyRowOp, ep::WarpAccumulateOp, ep::WarpReduceOp,
              ep::WarpSumRowsOp, ep::WarpFanoutRowOp, ep::WarpCopyRowAroundOp>(op))
        warpOps.push_back(op);
    });
    for (Operation* op : warpOps) {
      if (auto quantize = dyn_cast<ep::WarpQuantizeOp>(op); quantize && !quantize.getMethod()) {
        op->emitError() << "no conversion method: run ep-lower-numerics before ep-lower-warp-ops";
        return signalPassFailure();
      }
      if (auto dequantize = dyn_cast<ep::WarpDequantizeOp>(op); dequantize && !dequantize.getMethod()) {
        op->emitError() << "no conversion method: run ep-lower-numerics before ep-lower-warp-ops";
        return signalPassFailure();
      }
      if (auto sum = dyn_cast<ep::WarpSumRowsOp>(op); sum && sum.getFormat() && !sum.getMethod()) {
        op->emitError() << "no conversion method: run ep-lower-numerics before ep-lower-warp-ops";
        return signalPassFailure();
      }
      ImplicitLocOpBuilder builder(op->getLoc(), op);
      Lowering lowering{builder, *target};
      if (auto quantize = dyn_cast<ep::WarpQuantizeOp>(op)) lowerConversion(quantize, lowering, true);
      if (auto dequantize = dyn_cast<ep::WarpDequantizeOp>(op)) lowerConversion(dequantize, lowering, false);
      if (auto copy = dyn_cast<ep::WarpCopyRowOp>(op); copy && failed(lowerCopy(copy, lowering)))
        return signalPassFailure();
      if (auto around = dyn_cast<ep::WarpCopyRowAroundOp>(op); around && failed(lowerCopyAround(around, lowering)))
        return signalPassFailure();
      if (auto accumulate = dyn_cast<ep::WarpAccumulateOp>(op)) lowerAccumulate(accumulate, lowering);
      if (auto reduce = dyn_cast<ep::WarpReduceOp>(op)) reduce.getResult().replaceAllUsesWith(lowerReduce(reduce, lowering));
      if (auto sum = dyn_cast<ep::WarpSumRowsOp>(op); sum && failed(lowerSumRows(sum, lowering)))
        return signalPassFailure();
      if (auto fanout = dyn_cast<ep::WarpFanoutRowOp>(op); fanout && failed(lowerFanout(fanout, lowering)))
        return signalPassFailure();
      op->erase();
    }
    module->setAttr(ep::EpDialect::kLoweringAttrName,
                    StringAttr::get(&getContext(), target->is_simt() ? "simt" : "lanes"));
  }
};

}  // namespace
}  // namespace epjit
