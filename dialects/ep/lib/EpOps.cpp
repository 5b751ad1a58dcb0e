#include "epjit/Dialect/Ep/EpOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace epjit::ep;

//===----------------------------------------------------------------------===//
// custom<BareEnum>: an enum attribute written as its bare keyword (`system`
// rather than `#ep.scope<system>`) inside an op's syntax.
//===----------------------------------------------------------------------===//

template <typename AttrT>
static ParseResult parseBareEnum(OpAsmParser& parser, AttrT& attr) {
  using EnumT = decltype(std::declval<AttrT>().getValue());
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword)) return failure();
  std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword);
  if (!value) return parser.emitError(loc) << "'" << keyword << "' is not a valid " << AttrT::getMnemonic();
  attr = AttrT::get(parser.getContext(), *value);
  return success();
}

template <typename AttrT>
static void printBareEnum(OpAsmPrinter& printer, Operation*, AttrT attr) {
  printer << stringifyEnum(attr.getValue());
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

// bf16 or f32, or a type parameter that ep-specialize binds to one of them.
static bool isRowElementType(Type type) {
  return type.isBF16() || type.isF32() || isa<RowElementParamType>(type);
}

//===----------------------------------------------------------------------===//
// Template parameters
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  Type type = getType();
  if (auto row = dyn_cast<RowElementParamType>(type)) {
    if (row.getName() != getSymName())
      return emitOpError() << "type parameter @" << getSymName() << " must be declared as !ep.row_elem<\""
                           << getSymName() << "\">, not " << type;
    if (getDefaultValueAttr() || getMultipleOf() || getMin() || getAtMost())
      return emitOpError() << "type parameter @" << getSymName() << " takes no default, multiple_of, min or at_most";
    return success();
  }
  if (!isa<IndexType>(type) && !type.isInteger(32) && !type.isInteger(64) && !type.isInteger(1))
    return emitOpError() << "parameter @" << getSymName() << " has type " << type
                         << "; parameters are index, i32, i64, i1, or !ep.row_elem<\"NAME\"> (a row type)";
  if (auto value = getDefaultValueAttr()) {
    if (value.getType() != type)
      return emitOpError() << "default of @" << getSymName() << " has type " << value.getType()
                           << ", expected " << type;
  }
  if (getMultipleOf() && *getMultipleOf() < 1)
    return emitOpError() << "multiple_of must be >= 1";
  // Unbound, a runtime parameter is a window-table word the kernels read:
  // a count, with nothing that only a compile-time value could mean.
  if (getRuntime() && (!isa<IndexType>(type) || getDefaultValueAttr() || getNames() || getAtMost()))
    return emitOpError() << "runtime parameter @" << getSymName()
                         << " must be an index with no default_value, names or at_most (unbound, the runtime "
                            "passes its value)";
  if (auto fact = getAtMost()) {
    if (*fact != EpDialect::kWaveSizeFact)
      return emitOpError() << "at_most names a target fact: \"" << EpDialect::kWaveSizeFact << "\", not \"" << *fact
                           << "\"";
    if (type.isInteger(1)) return emitOpError() << "at_most bounds an integer parameter; @" << getSymName() << " is i1";
  }
  if (auto names = getNames()) {
    if (!isa<IndexType>(type) && !type.isInteger(32) && !type.isInteger(64))
      return emitOpError() << "names go with an integer parameter; @" << getSymName() << " is " << type;
    llvm::StringSet<> seen;
    for (Attribute name : *names)
      if (!seen.insert(cast<StringAttr>(name).getValue()).second)
        return emitOpError() << "the name '" << cast<StringAttr>(name).getValue() << "' appears twice";
  }
  return success();
}

LogicalResult ParamValueOp::verifySymbolUses(SymbolTableCollection& symbols) {
  auto param = symbols.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param) return emitOpError() << "@" << getParam() << " is not a declared ep.param";
  if (param.getType() != getType())
    return emitOpError() << "@" << getParam() << " is declared " << param.getType() << " but read as "
                         << getType();
  return success();
}

LogicalResult ConstantOp::verify() {
  Type type = getValue().getType();
  if (!isa<IndexType>(type) && !type.isInteger(32) && !type.isInteger(64))
    return emitOpError() << "constant @" << getSymName() << " has type " << type << "; constants are index, i32 or i64";
  if (!isa<IntegerAttr>(getValue())) return emitOpError() << "constant @" << getSymName() << " must be an integer";
  return success();
}

LogicalResult ConstantValueOp::verifySymbolUses(SymbolTableCollection& symbols) {
  auto constant = symbols.lookupNearestSymbolFrom<ConstantOp>(*this, getConstantAttr());
  if (!constant) return emitOpError() << "@" << getConstant() << " is not a declared ep.constant";
  if (constant.getValue().getType() != getType())
    return emitOpError() << "@" << getConstant() << " is declared " << constant.getValue().getType()
                         << " but read as " << getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

static bool isKernelArgumentType(Type type) {
  return isa<PtrType, WindowType, IndexType>(type) || type.isInteger(32) || type.isInteger(64) || type.isF32();
}

// ep.kernel @name(%a: T, ...) warps_per_block(N) [attributes {...}] { body }
// The argument names are kept (arg_names): they are the kernel's interface.
ParseResult KernelOp::parse(OpAsmParser& parser, OperationState& result) {
  Builder& builder = parser.getBuilder();
  StringAttr name;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(), result.attributes)) return failure();
  SmallVector<OpAsmParser::Argument> arguments;
  if (parser.parseArgumentList(arguments, OpAsmParser::Delimiter::Paren, /*allowType=*/true, /*allowAttrs=*/false))
    return failure();
  int64_t warps = 0;
  if (parser.parseKeyword("warps_per_block") || parser.parseLParen() || parser.parseInteger(warps) ||
      parser.parseRParen())
    return failure();
  if (succeeded(parser.parseOptionalKeyword("when"))) {
    // Clauses joined by `and`: @param, or @param PREDICATE operand.
    SmallVector<Attribute> params, predicates, operands;
    if (parser.parseLParen()) return failure();
    do {
      FlatSymbolRefAttr param;
      if (parser.parseAttribute(param)) return failure();
      params.push_back(param);
      StringRef predicate;
      Attribute operand = builder.getUnitAttr();
      if (succeeded(parser.parseOptionalKeyword(&predicate, kWhenPredicates)) && parser.parseAttribute(operand))
        return failure();
      predicates.push_back(builder.getStringAttr(predicate));
      operands.push_back(operand);
    } while (succeeded(parser.parseOptionalKeyword("and")));
    if (parser.parseRParen()) return failure();
    result.addAttribute(getWhenParamsAttrName(result.name), builder.getArrayAttr(params));
    result.addAttribute(getWhenPredicatesAttrName(result.name), builder.getArrayAttr(predicates));
    result.addAttribute(getWhenOperandsAttrName(result.name), builder.getArrayAttr(operands));
  }
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes)) return failure();
  SmallVector<Type> types;
  SmallVector<Attribute> names;
  for (const OpAsmParser::Argument& argument : arguments) {
    types.push_back(argument.type);
    names.push_back(builder.getStringAttr(argument.ssaName.name.drop_front()));  // without the '%'
  }
  result.addAttribute(getFunctionTypeAttrName(result.name), TypeAttr::get(builder.getFunctionType(types, {})));
  result.addAttribute(getArgNamesAttrName(result.name), builder.getArrayAttr(names));
  result.addAttribute(getWarpsPerBlockAttrName(result.name), builder.getI64IntegerAttr(warps));
  Region* body = result.addRegion();
  if (parser.parseRegion(*body, arguments)) return failure();
  KernelOp::ensureTerminator(*body, builder, result.location);
  return success();
}

void KernelOp::print(OpAsmPrinter& printer) {
  printer << ' ';
  printer.printSymbolName(getSymName());
  printer << '(';
  Block& entry = getBody().front();
  llvm::interleaveComma(entry.getArguments(), printer,
                        [&](BlockArgument argument) { printer.printRegionArgument(argument); });
  printer << ") warps_per_block(" << getWarpsPerBlock() << ")";
  if (getWhenClauseCount() > 0) {
    printer << " when(";
    for (size_t i = 0; i < getWhenClauseCount(); ++i) {
      if (i > 0) printer << " and ";
      printer.printAttribute(getWhenParamsAttr()[i]);
      if (Attribute operand = getWhenClauseOperand(i)) {
        printer << ' ' << getWhenClausePredicate(i) << ' ';
        printer.printAttributeWithoutType(operand);
      }
    }
    printer << ')';
  }
  printer.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(), {SymbolTable::getSymbolAttrName(), getFunctionTypeAttrName(), getArgNamesAttrName(),
                            getWarpsPerBlockAttrName(), getWhenParamsAttrName(), getWhenPredicatesAttrName(),
                            getWhenOperandsAttrName()});
  printer << ' ';
  printer.printRegion(getBody(), /*printEntryBlockArgs=*/false, /*printBlockTerminators=*/false);
}

// Every clause of when(...) is @param, or @param PREDICATE operand with an
// operand that is a parameter, an integer or a name; what the names mean is
// ep-specialize's to check.
LogicalResult KernelOp::verifyWhen() {
  const bool hasParams = bool(getWhenParamsAttr());
  if (!hasParams && (getWhenPredicatesAttr() || getWhenOperandsAttr()))
    return emitOpError() << "when predicates or operands without their parameters";
  if (!hasParams) return success();
  const size_t clauses = getWhenParamsAttr().size();
  if (clauses == 0) return emitOpError() << "when(...) needs at least one clause";
  if (!getWhenPredicatesAttr() || !getWhenOperandsAttr() || getWhenPredicatesAttr().size() != clauses ||
      getWhenOperandsAttr().size() != clauses)
    return emitOpError() << "when(...) needs a predicate and an operand entry for each of its " << clauses
                         << " parameters (\"\" and a unit attribute for an i1 parameter alone)";
  for (size_t i = 0; i < clauses; ++i) {
    const StringRef predicate = getWhenClausePredicate(i);
    const Attribute operand = getWhenClauseOperand(i);
    if (predicate.empty() != !operand)
      return emitOpError() << "when(...) needs both a predicate and an operand, or neither";
    if (predicate.empty()) continue;
    if (!llvm::is_contained(kWhenPredicates, predicate))
      return emitOpError() << "when predicate '" << predicate << "' is not one of eq, ne, lt, le, gt, ge";
    if (!isa<FlatSymbolRefAttr, IntegerAttr, StringAttr>(operand))
      return emitOpError() << "when compares with a parameter (@name), an integer or a name (\"...\"); got "
                           << operand;
  }
  return success();
}

void KernelOp::getAsmBlockArgumentNames(Region& region, OpAsmSetValueNameFn setName) {
  if (region.empty()) return;
  for (auto [index, argument] : llvm::enumerate(region.front().getArguments()))
    if (index < getArgNames().size()) setName(argument, getArgName(unsigned(index)));
}

LogicalResult KernelOp::verify() {
  if (getWarpsPerBlock() < 1) return emitOpError() << "warps_per_block must be >= 1";
  if (failed(verifyWhen())) return failure();
  ArrayRef<Type> types = getArgumentTypes();
  if (!getFunctionType().getResults().empty()) return emitOpError() << "an ep kernel returns nothing";
  if (getArgNames().size() != types.size())
    return emitOpError() << "has " << types.size() << " parameters but " << getArgNames().size() << " names";
  llvm::StringSet<> seen;
  for (auto [index, type] : llvm::enumerate(types)) {
    const StringRef name = getArgName(unsigned(index));
    if (name.empty()) return emitOpError() << "parameter #" << index << " has no name";
    if (!seen.insert(name).second) return emitOpError() << "two parameters are named '" << name << "'";
    if (!isKernelArgumentType(type))
      return emitOpError() << "parameter '" << name << "' has type " << type
                           << "; kernel parameters are !ep.ptr, !ep.window, index, i32, i64 or f32";
  }
  Block& entry = getBody().front();
  if (entry.getNumArguments() != types.size() ||
      !llvm::equal(entry.getArgumentTypes(), types))
    return emitOpError() << "the body's arguments do not match the kernel's parameter types";
  if (std::optional<ArrayRef<int64_t>> alignment = getPointerAlignment()) {
    if (alignment->size() != types.size())
      return emitOpError() << "pointer_alignment has " << alignment->size() << " entries for " << types.size()
                           << " parameters";
    for (auto [index, type] : llvm::enumerate(types)) {
      const int64_t bytes = (*alignment)[index];
      const bool pointer = isa<PtrType>(type);
      if (pointer ? (bytes < 1 || !llvm::isPowerOf2_64(uint64_t(bytes))) : bytes != 0)
        return emitOpError() << "pointer_alignment of parameter '" << getArgName(unsigned(index)) << "' is " << bytes
                             << "; a pointer's is a power of two, any other parameter's 0";
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Memory and synchronization
//===----------------------------------------------------------------------===//

LogicalResult WindowRegionOp::verify() {
  if (getCount().front().empty() || !isa<YieldOp>(getCount().front().back()))
    return emitOpError() << "region @" << getSymName() << "'s body must end with ep.yield of its element count";
  if (!isPointeeType(getElement()))
    return emitOpError() << "region @" << getSymName() << " holds " << getElement()
                         << "; a region's elements are what an !ep.ptr may point to";
  return success();
}

namespace {
// The count a window region's or buffer part's body yields, once folded to a constant.
std::optional<int64_t> yieldedConstant(Region& count) {
  auto yield = cast<YieldOp>(count.front().getTerminator());
  auto constant = yield.getCount().getDefiningOp<arith::ConstantIndexOp>();
  if (!constant) return std::nullopt;
  return constant.value();
}
}  // namespace

std::optional<int64_t> WindowRegionOp::getConstantCount() { return yieldedConstant(getCount()); }

LogicalResult BufferPartOp::verify() {
  if (getCount().front().empty() || !isa<YieldOp>(getCount().front().back()))
    return emitOpError() << "part @" << getSymName() << "'s body must end with ep.yield of its element count";
  if (!isPointeeType(getElement()))
    return emitOpError() << "part @" << getSymName() << " holds " << getElement()
                         << "; a buffer part's elements are what an !ep.ptr may point to";
  if (getBuffer().empty()) return emitOpError() << "part @" << getSymName() << " names no buffer";
  // A row element type parameter has its size once bound (ep-specialize).
  const int64_t bytes = getElement().isIntOrFloat() ? elementBytes(getElement()) : 1;
  if (auto align = getAlign(); align && (int64_t(*align) < bytes || !llvm::isPowerOf2_64(*align) ||
                                         int64_t(*align) % bytes != 0))
    return emitOpError() << "part @" << getSymName() << " has align " << *align
                         << "; an alignment is a power of two and a multiple of the element size (" << bytes
                         << " bytes)";
  return success();
}

std::optional<int64_t> BufferPartOp::getConstantCount() { return yieldedConstant(getCount()); }

int64_t BufferPartOp::getAlignment() {
  return getAlign() ? int64_t(*getAlign()) : elementBytes(getElement());
}

LogicalResult BufferOffsetOp::verifySymbolUses(SymbolTableCollection& symbols) {
  if (!symbols.lookupNearestSymbolFrom<BufferPartOp>(*this, getPartAttr()))
    return emitOpError() << "@" << getPart() << " is not a declared ep.buffer_part";
  return success();
}

FailureOr<std::vector<BufferPlacement>> epjit::ep::placeBuffers(ModuleOp module) {
  std::vector<BufferPlacement> buffers;
  for (auto part : module.getOps<BufferPartOp>()) {
    std::optional<int64_t> count = part.getConstantCount();
    if (!count)
      return part.emitError() << "the count of buffer part @" << part.getSymName()
                              << " is not a constant after specialization: compute it from parameters and named "
                                 "constants only";
    if (*count < 0) return part.emitError() << "buffer part @" << part.getSymName() << " has count " << *count;
    auto buffer = llvm::find_if(buffers, [&](const BufferPlacement& b) { return b.name == part.getBuffer(); });
    if (buffer == buffers.end()) {
      buffers.push_back({part.getBuffer().str(), 0, {}});
      buffer = std::prev(buffers.end());
    }
    if (!part.getElement().isIntOrFloat())
      return part.emitError() << "buffer part @" << part.getSymName() << " holds " << part.getElement()
                              << ", whose size is not known before its parameter is bound";
    const int64_t align = part.getAlignment();
    const int64_t offset = (buffer->bytes + align - 1) / align * align;
    buffer->parts.emplace_back(part, offset);
    buffer->bytes = offset + *count * elementBytes(part.getElement());
  }
  return buffers;
}

LogicalResult PeerPtrOp::verifySymbolUses(SymbolTableCollection& symbols) {
  if (!symbols.lookupNearestSymbolFrom<WindowRegionOp>(*this, getRegionAttr()))
    return emitOpError() << "@" << getRegion() << " is not a declared ep.window_region";
  return success();
}

LogicalResult AtomicLoadOp::verify() {
  if (getOrder() == MemoryOrder::release || getOrder() == MemoryOrder::acq_rel)
    return emitOpError() << "a load cannot have " << stringifyEnum(getOrder())
                         << " order; use relaxed or acquire";
  return success();
}

LogicalResult AtomicStoreOp::verify() {
  if (getOrder() == MemoryOrder::acquire || getOrder() == MemoryOrder::acq_rel)
    return emitOpError() << "a store cannot have " << stringifyEnum(getOrder())
                         << " order; use relaxed or release";
  return success();
}

LogicalResult FenceOp::verify() {
  if (getOrder() == MemoryOrder::relaxed)
    return emitOpError() << "a relaxed fence orders nothing; use acquire, release or acq_rel";
  return success();
}

LogicalResult WaitUntilOp::verify() {
  if (auto limit = getTimeoutMs().getDefiningOp<arith::ConstantIntOp>(); limit && limit.value() < 1)
    return emitOpError() << "timeout_ms must be >= 1 (a wait is always bounded in time); got " << limit.value();
  if (!elementTypeOf(getError()).isInteger(32))
    return emitOpError() << "the error word is an i32; got " << getError().getType();
  if (auto code = getCode().getDefiningOp<arith::ConstantIntOp>(); code && code.value() == 0)
    return emitOpError() << "error code 0 means no error; use a nonzero code";
  return success();
}

//===----------------------------------------------------------------------===//
// Warp operations
//===----------------------------------------------------------------------===//

LogicalResult WarpCopyRowOp::verify() {
  Type src = elementTypeOf(getSrc()), dst = elementTypeOf(getDst());
  if (getFlag()) {
    if (src == dst && isRowElementType(src)) return success();
    return emitOpError() << "a flagged copy moves bf16 or f32 rows unconverted (16-byte chunks, two lines each); got "
                         << src << " -> " << dst;
  }
  if (src == dst || (isRowElementType(src) && isRowElementType(dst))) return success();
  if (src.isInteger(64) && dst.isInteger(32)) return success();  // int64 ids narrowed (out of range: INT32_MAX)
  return emitOpError() << "copies between equal element types, between bf16 and f32, or i64 to i32; got " << src
                       << " -> " << dst;
}

LogicalResult WarpReduceOp::verify() {
  if (!isRowElementType(elementTypeOf(getSrc())))
    return emitOpError() << "reduces bf16 or f32 rows; got " << elementTypeOf(getSrc());
  return success();
}

LogicalResult WarpAccumulateOp::verify() {
  if (!elementTypeOf(getAcc()).isF32())
    return emitOpError() << "accumulates into f32; got " << getAcc().getType();
  if (!isRowElementType(elementTypeOf(getSrc())))
    return emitOpError() << "accumulates bf16 or f32 rows; got " << elementTypeOf(getSrc());
  return success();
}

// Shared by ep.warp.quantize and ep.warp.dequantize: `codes` is the side that
// holds fp8/fp4 bytes, `values` the bf16/f32 side.
template <typename OpT>
static LogicalResult verifyQuantizeLike(OpT op, Value values, Value codes, bool quantize) {
  if (!isRowElementType(elementTypeOf(values)))
    return op.emitOpError() << "values are bf16 or f32; got " << elementTypeOf(values);
  if (!elementTypeOf(codes).isInteger(8))
    return op.emitOpError() << "codes are bytes (!ep.ptr<i8>); got " << elementTypeOf(codes);

  const bool fp4 = isa<Fp4KindAttr>(op.getFormat());
  std::optional<ScaleKind> scale;
  if (auto attr = op.getScaleAttr()) scale = attr.getValue();
  const int64_t block = op.getBlockSize();
  if (bool(op.getBlock()) != bool(scale))
    return op.emitOpError() << "block and scale go together: give both (scaled) or neither (direct cast)";
  if (bool(op.getBlock()) != bool(op.getScales()))
    return op.emitOpError() << (op.getBlock() ? "a scaled conversion needs a scales operand"
                                              : "a direct cast takes no scales operand");
  if (fp4 && (block != 32 || scale != ScaleKind::e8m0))
    return op.emitOpError() << "fp4 is MX-scaled: it needs block = 32 and scale = #ep.scale<e8m0>";
  if (scale == ScaleKind::e8m0 && block != 32)
    return op.emitOpError() << "e8m0 (MX) scales cover blocks of 32 elements; got block = " << block;
  if (scale == ScaleKind::f32 && block != 128)
    return op.emitOpError() << "f32 blockwise scales cover blocks of 128 elements; got block = " << block;
  if (scale && isDeepEpScale(*scale)) {
    if (!quantize)
      return op.emitOpError() << "#ep.scale<" << stringifyEnum(*scale)
                              << "> is a quantize rule; dequantize its codes with #ep.scale<f32> (the stored "
                                 "scale is the inverse) or #ep.scale<e8m0> (the ue8m0 byte)";
    auto fp8 = dyn_cast<Fp8KindAttr>(op.getFormat());
    if (block != 128 || !fp8 || fp8.getValue() != Fp8Kind::e4m3fn)
      return op.emitOpError() << "#ep.scale<" << stringifyEnum(*scale)
                              << "> is DeepEP's cast: block = 128 and format = #ep.fp8<e4m3fn> (its 448)";
  }
  if (op.getScalesGroup() && !op.getScalesStride())
    return op.emitOpError() << "scales_group needs a scales_stride (the distance between groups)";
  if (op.getScalesStride() && !op.getScales())
    return op.emitOpError() << "scales_stride without scales";
  if (op.getScalesGroup() && *op.getScalesGroup() < 1)
    return op.emitOpError() << "scales_group is at least 1; got " << *op.getScalesGroup();
  if (Value scales = op.getScales()) {
    const bool f32 = scale == ScaleKind::f32 || scale == ScaleKind::deepep || scale == ScaleKind::deepep_pow2;
    Type want = f32 ? Type(Float32Type::get(op.getContext())) : Type(IntegerType::get(op.getContext(), 8));
    if (elementTypeOf(scales) != want)
      return op.emitOpError() << "scales of kind " << stringifyEnum(*scale) << " are stored as "
                              << PtrType::get(op.getContext(), want) << "; got " << scales.getType();
  }
  return success();
}

LogicalResult WarpSumRowsOp::verify() {
  if (!isRowElementType(elementTypeOf(getDst())))
    return emitOpError() << "sums into bf16 or f32 rows; got " << elementTypeOf(getDst());
  Block& body = getBody().front();
  if (body.getNumArguments() != 1 || !body.getArgument(0).getType().isIndex())
    return emitOpError() << "the body takes one index argument: the source's number";
  if (body.empty() || !isa<SourceOp>(body.back()))
    return emitOpError() << "the body must end with ep.source";
  SourceOp source = getSource();
  Type row = elementTypeOf(source.getRow());
  if (getFormat()) {
    if (!row.isInteger(8)) return emitOpError() << "fp8 sources are codes (!ep.ptr<i8>); got " << row;
  } else if (!isRowElementType(row)) {
    return emitOpError() << "sources are bf16 or f32 rows (or fp8 codes with a format); got " << row;
  }
  const bool scaled = getBlock().has_value();
  if (scaled != getScale().has_value() || (scaled && !getFormat()))
    return emitOpError() << "block and scale go together, with a format: give all three (blockwise fp8) or none";
  if (scaled && (*getBlock() != 128 || *getScale() != ScaleKind::f32))
    return emitOpError() << "scaled sources are fp8 blockwise: block = 128 and scale = #ep.scale<f32>";
  if (scaled != bool(source.getScales()))
    return emitOpError() << (scaled ? "scaled sources give their scales: ep.source ... scales %s"
                                    : "ep.source gives scales only for scaled sources");
  if (source.getScales() && !elementTypeOf(source.getScales()).isF32())
    return emitOpError() << "blockwise scales are f32; got " << source.getScales().getType();
  const int waitParts = int(bool(getFlag())) + int(bool(getError())) + int(bool(getErrorIndex())) +
                        int(bool(getCode())) + int(bool(getTimeoutMs()));
  if (waitParts != 0 && waitParts != 5)
    return emitOpError() << "flagged sources need all of flag, error word, error index, code and timeout_ms";
  if (source.getUnflagged() && !getFlag())
    return emitOpError() << "ep.source ... unflagged(...) names plain rows among flagged ones: the sum must be flagged";
  if (source.getWeight() && (getFormat() || getFlag()))
    return emitOpError() << "weighted sources are plain bf16 or f32 rows: no format, not flagged";
  if (getFlag()) {
    if (getFormat()) return emitOpError() << "flagged sources are bf16 or f32 rows, not fp8 codes";
    if (!elementTypeOf(getError()).isInteger(32))
      return emitOpError() << "the error word of a flagged sum is i32; got " << getError().getType();
  }
  return success();
}

LogicalResult WarpFanoutRowOp::verify() {
  Block& body = getBody().front();
  if (body.getNumArguments() != 1 || !body.getArgument(0).getType().isIndex())
    return emitOpError() << "the body takes one index argument: the destination's number";
  if (body.empty() || !isa<DestinationOp>(body.back()))
    return emitOpError() << "the body must end with ep.destination";
  Type src = elementTypeOf(getSrc()), dst = elementTypeOf(getDestination().getRow());
  if (src != dst)
    return emitOpError() << "destinations hold the source's element type (" << src << "); got " << dst;
  return success();
}

LogicalResult WarpCopyRowAroundOp::verify() {
  Block& body = getBody().front();
  if (body.getNumArguments() != 0) return emitOpError() << "the body takes no arguments";
  if (body.empty() || !isa<CopyToOp>(body.back())) return emitOpError() << "the body must end with ep.copy_to";
  CopyToOp copyTo = getCopyTo();
  Type src = elementTypeOf(getSrc()), dst = elementTypeOf(copyTo.getRow());
  if (src != dst) return emitOpError() << "the destination holds the source's element type (" << src << "); got " << dst;
  if (copyTo.getFlag() && !isRowElementType(src))
    return emitOpError() << "a flagged destination holds bf16 or f32 rows; got " << src;
  if (!llvm::equal(copyTo.getValues().getTypes(), getResultTypes()))
    return emitOpError() << "ep.copy_to yields the op's result types (" << getResultTypes().size()
                         << " values); it yields " << copyTo.getValues().size();
  return success();
}

LogicalResult WarpQuantizeOp::verify() { return verifyQuantizeLike(*this, getSrc(), getDst(), true); }
LogicalResult WarpDequantizeOp::verify() { return verifyQuantizeLike(*this, getDst(), getSrc(), false); }

LogicalResult DeepEpScaleOp::verify() {
  if (!isDeepEpScale(getScale()))
    return emitOpError() << "takes a DeepEP scale kind (deepep, deepep_pow2, deepep_ue8m0); got "
                         << stringifyEnum(getScale());
  const bool byte = getScale() == ScaleKind::deepep_ue8m0;
  if (getStored().getType().isInteger(8) != byte)
    return emitOpError() << "the stored scale of " << stringifyEnum(getScale()) << " is " << (byte ? "i8" : "f32");
  return success();
}

#define GET_OP_CLASSES
#include "epjit/Dialect/Ep/EpOps.cpp.inc"
