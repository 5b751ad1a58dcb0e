// ep-specialize: bind template parameters to constants, then fold.
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/StringMap.h"

#include "epjit/Compiler/Passes.h"
#include "epjit/Dialect/Ep/EpOps.h"
#include "RuntimeParams.h"
#include "epjit/interface_schema.h"
#include "epjit/targets/common/window.h"

namespace epjit {
#define GEN_PASS_DEF_EPSPECIALIZE
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

constexpr llvm::StringLiteral kWarpsPerBlock = "warps_per_block";

// A type as written in IR (diagnostics quote types streamed into them).
std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

std::string parameterList(ModuleOp module) {
  std::string names;
  for (auto param : module.getOps<ep::ParamOp>()) {
    if (!names.empty()) names += ", ";
    names += param.getSymName().str();
  }
  return names.empty() ? std::string("none") : names;
}

// The index of `name` among the parameter's `names`, if it is one of them.
std::optional<int64_t> indexOfName(ep::ParamOp param, StringRef name) {
  if (auto names = param.getNames())
    for (auto [index, candidate] : llvm::enumerate(names->getAsValueRange<StringAttr>()))
      if (candidate == name) return int64_t(index);
  return std::nullopt;
}

// " (a, b, c)": the parameter's names, for a diagnostic.
void appendNames(InFlightDiagnostic& diagnostic, ep::ParamOp param) {
  diagnostic << " (";
  llvm::interleaveComma(param.getNames()->getAsValueRange<StringAttr>(), diagnostic);
  diagnostic << ")";
}

// Parses `text` as a value of the parameter's type (or one of its names);
// emits an error naming the parameter and the expected form when it is not one.
FailureOr<TypedAttr> parseBinding(ep::ParamOp param, StringRef text) {
  Builder builder(param.getContext());
  Type type = param.getType();
  if (std::optional<int64_t> index = indexOfName(param, text)) return TypedAttr(builder.getIntegerAttr(type, *index));
  if (type.isInteger(1)) {
    if (text == "true" || text == "1") return TypedAttr(builder.getBoolAttr(true));
    if (text == "false" || text == "0") return TypedAttr(builder.getBoolAttr(false));
    return param.emitError() << "parameter '" << param.getSymName() << "' takes true or false; got '" << text
                             << "'";
  }
  int64_t value = 0;
  if (text.getAsInteger(0, value)) {
    auto diagnostic = param.emitError() << "parameter '" << param.getSymName() << "' takes an integer ("
                                        << typeName(type) << ")";
    if (param.getNames()) {
      diagnostic << " or one of its names";
      appendNames(diagnostic, param);
    }
    return diagnostic << "; got '" << text << "'";
  }
  if (type.isInteger(32) && (value < INT32_MIN || value > INT32_MAX))
    return param.emitError() << "parameter '" << param.getSymName() << "' is an i32; " << value
                             << " does not fit";
  return TypedAttr(builder.getIntegerAttr(type, value));
}

// A type parameter's binding: the row element types a template may be instantiated with.
FailureOr<Type> parseTypeBinding(ep::ParamOp param, StringRef text) {
  Builder builder(param.getContext());
  if (text == "bf16") return Type(builder.getBF16Type());
  if (text == "f32") return Type(builder.getF32Type());
  return param.emitError() << "type parameter '" << param.getSymName() << "' takes bf16 or f32; got '" << text
                           << "'";
}

// Every !ep.row_elem<"name"> in the module becomes its bound type.
void substituteTypeParameters(ModuleOp module, const llvm::StringMap<Type>& types) {
  if (types.empty()) return;
  AttrTypeReplacer replacer;
  replacer.addReplacement([&](ep::RowElementParamType param) -> std::optional<Type> {
    auto it = types.find(param.getName());
    if (it == types.end()) return std::nullopt;
    return it->second;
  });
  replacer.recursivelyReplaceElementsIn(module, /*replaceAttrs=*/true, /*replaceLocs=*/false, /*replaceTypes=*/true);
}

LogicalResult checkConstraints(ep::ParamOp param, TypedAttr value) {
  auto integer = dyn_cast<IntegerAttr>(value);
  if (!integer || param.getType().isInteger(1)) return success();
  const int64_t v = integer.getValue().getSExtValue();
  if (auto names = param.getNames(); names && (v < 0 || v >= int64_t(names->size())))
    return param.emitError() << "parameter '" << param.getSymName() << "' = " << v << " names nothing; it takes 0 to "
                             << names->size() - 1 << " or a name";
  if (auto min = param.getMin(); min && v < int64_t(*min))
    return param.emitError() << "parameter '" << param.getSymName() << "' = " << v << " is below its minimum "
                             << *min;
  if (auto multiple = param.getMultipleOf(); multiple && v % int64_t(*multiple) != 0)
    return param.emitError() << "parameter '" << param.getSymName() << "' = " << v
                             << " must be a multiple of " << *multiple;
  return success();
}

// Every loaded dialect's and registered operation's canonicalizations.
FrozenRewritePatternSet foldingPatterns(MLIRContext* context) {
  RewritePatternSet patterns(context);
  for (Dialect* dialect : context->getLoadedDialects()) dialect->getCanonicalizationPatterns(patterns);
  for (RegisteredOperationName op : context->getRegisteredOperations())
    op.getCanonicalizationPatterns(patterns, context);
  return FrozenRewritePatternSet(std::move(patterns));
}

// A byte offset or size linear in the runtime parameters: constant plus
// per[i] times runtime parameter i.
struct LinearBytes {
  int64_t constant = 0;
  SmallVector<int64_t> per;
  bool varies() const { return llvm::any_of(per, [](int64_t c) { return c != 0; }); }
  bool multipleOf(int64_t n) const {
    return constant % n == 0 && llvm::all_of(per, [&](int64_t c) { return c % n == 0; });
  }
};

// Each ep.buffer_offset becomes its part's offset in elements, by the one
// placement rule of the buffers (placeBuffers, schema::place_part): a
// constant, or, after a part sized by runtime parameters, the same linear
// form the runtime computes, read from those parameters (threaded to the
// kernels' window table after this). The parts' counts are folded first:
// they are isolated bodies of parameters and constants.
LogicalResult bindBufferOffsets(ModuleOp module, const FrozenRewritePatternSet& patterns,
                                const std::vector<std::string>& runtimeParams) {
  for (auto part : module.getOps<ep::BufferPartOp>()) (void)applyPatternsGreedily(part, patterns);
  if (failed(ep::placeBuffers(module))) return failure();  // its checks of counts and elements
  llvm::StringMap<LinearBytes> ends;                        // per buffer: where its last part ends
  llvm::StringMap<LinearBytes> offsets;                     // per part
  llvm::StringMap<std::string> unplaceable;                 // part -> why its offset is not linear
  for (auto part : module.getOps<ep::BufferPartOp>()) {
    LinearBytes& end = ends[part.getBuffer()];
    end.per.resize(runtimeParams.size(), 0);
    const int64_t align = part.getAlignment();
    if (!end.varies()) {
      end.constant = int64_t(schema::place_part(uint64_t(end.constant), uint64_t(align)));
    } else if (!end.multipleOf(align)) {
      // The padding before the part would depend on the values.
      unplaceable[part.getSymName()] = "the parts before it end at a runtime-sized offset that is not always a "
                                       "multiple of its alignment (" + std::to_string(align) + " bytes)";
    }
    offsets[part.getSymName()] = end;
    const int64_t bytes = ep::elementBytes(part.getElement());
    end.constant += *part.getConstantCount() * bytes;
    if (auto per = part->getAttrOfType<DictionaryAttr>(ep::EpDialect::kCountPerAttrName))
      for (NamedAttribute entry : per)
        for (size_t i = 0; i < runtimeParams.size(); ++i)
          if (runtimeParams[i] == entry.getName().strref())
            end.per[i] += cast<IntegerAttr>(entry.getValue()).getInt() * bytes;
  }
  bool failed = false;
  module.walk([&](ep::BufferOffsetOp read) {
    if (auto why = unplaceable.find(read.getPart()); why != unplaceable.end()) {
      read.emitError() << "buffer part @" << read.getPart() << " has no offset a kernel can compute: "
                       << why->second << "; give the runtime-sized parts before it an alignment it divides";
      failed = true;
      return;
    }
    auto part = SymbolTable::lookupNearestSymbolFrom<ep::BufferPartOp>(read, read.getPartAttr());
    const int64_t element = ep::elementBytes(part.getElement());
    const LinearBytes& at = offsets[read.getPart()];
    // Where folding puts a constant (the front of the function): a kernel's
    // emitted code is then the same as when the template computed the offset.
    Operation* scope = read->getParentWithTrait<OpTrait::IsIsolatedFromAbove>();
    OpBuilder builder = OpBuilder::atBlockBegin(&scope->getRegion(0).front());
    Value value = arith::ConstantIndexOp::create(builder, read.getLoc(), at.constant / element);
    for (size_t i = 0; i < runtimeParams.size(); ++i) {
      if (at.per[i] == 0) continue;
      Value param = ep::ParamValueOp::create(builder, read.getLoc(), builder.getIndexType(),
                                             FlatSymbolRefAttr::get(builder.getContext(), runtimeParams[i]));
      Value scale = arith::ConstantIndexOp::create(builder, read.getLoc(), at.per[i] / element);
      Value term = arith::MulIOp::create(builder, read.getLoc(), param, scale);
      value = arith::AddIOp::create(builder, read.getLoc(), value, term);
    }
    read.replaceAllUsesWith(value);
    read.erase();
  });
  return failure(failed);
}

// A kernel's when(...) as written, for the interface record.
std::string whenText(ep::KernelOp kernel) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (size_t i = 0; i < kernel.getWhenClauseCount(); ++i) {
    if (i > 0) os << " and ";
    os << "@" << kernel.getWhenClauseParam(i);
    if (Attribute operand = kernel.getWhenClauseOperand(i)) {
      os << ' ' << kernel.getWhenClausePredicate(i) << ' ';
      if (auto symbol = dyn_cast<FlatSymbolRefAttr>(operand))
        os << "@" << symbol.getValue();
      else if (auto integer = dyn_cast<IntegerAttr>(operand))
        os << integer.getValue().getSExtValue();
      else
        os << '"' << cast<StringAttr>(operand).getValue() << '"';
    }
  }
  return text;
}

struct EpSpecialize : impl::EpSpecializeBase<EpSpecialize> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (auto includes = module.getOps<ep::IncludeOp>(); !includes.empty()) {
      ep::IncludeOp include = *includes.begin();
      include.emitError() << "ep.include \"" << include.getFile() << "\" is not linked: run ep-link first";
      return signalPassFailure();
    }
    llvm::StringMap<std::string> requested;
    for (const std::string& binding : bindings) {
      auto [key, value] = StringRef(binding).split('=');
      if (key.empty() || value.empty() || !StringRef(binding).contains('=')) {
        module.emitError() << "binding '" << binding << "' is not KEY=VALUE";
        return signalPassFailure();
      }
      requested[key.trim()] = value.trim().str();
    }

    if (failed(bindGeometry(module, requested))) return signalPassFailure();

    llvm::StringMap<TypedAttr> values;
    llvm::StringMap<Type> types;
    std::vector<std::string> runtimeParams;  // left unbound: the kernels read them from the window table
    for (auto param : module.getOps<ep::ParamOp>()) {
      if (isa<ep::RowElementParamType>(param.getType())) {
        auto it = requested.find(param.getSymName());
        if (it == requested.end()) {
          param.emitError() << "type parameter '" << param.getSymName() << "' is not bound: pass "
                            << param.getSymName() << "=bf16 or " << param.getSymName() << "=f32";
          return signalPassFailure();
        }
        FailureOr<Type> type = parseTypeBinding(param, it->second);
        if (failed(type)) return signalPassFailure();
        types[param.getSymName()] = *type;
        requested.erase(it);
        continue;
      }
      TypedAttr value;
      if (auto it = requested.find(param.getSymName()); it != requested.end()) {
        FailureOr<TypedAttr> parsed = parseBinding(param, it->second);
        if (failed(parsed)) return signalPassFailure();
        value = *parsed;
        requested.erase(it);
      } else if (auto fallback = param.getDefaultValueAttr()) {
        value = fallback;
      } else if (param.getRuntime()) {
        runtimeParams.push_back(param.getSymName().str());
        continue;
      } else {
        param.emitError() << "parameter '" << param.getSymName() << "' is not bound: pass "
                          << param.getSymName() << "=VALUE (" << typeName(param.getType()) << ")";
        return signalPassFailure();
      }
      if (failed(checkConstraints(param, value))) return signalPassFailure();
      values[param.getSymName()] = value;
    }
    for (const auto& unknown : requested) {
      module.emitError() << "unknown parameter '" << unknown.getKey()
                         << "'; this template's parameters are: " << parameterList(module);
      return signalPassFailure();
    }

    if (failed(keepKernelsTheBindingsAsk(module, values))) return signalPassFailure();

    if (runtimeParams.size() > size_t(kMaxRuntimeParams)) {
      module.emitError() << runtimeParams.size() << " runtime parameters are left unbound; the window table holds "
                         << kMaxRuntimeParams << ": bind some";
      return signalPassFailure();
    }
    module.walk([&](ep::ParamValueOp read) {
      if (!values.contains(read.getParam())) return;  // a runtime parameter, bound below
      OpBuilder builder(read);
      auto constant = arith::ConstantOp::create(builder, read.getLoc(), values[read.getParam()]);
      read.replaceAllUsesWith(constant.getResult());
      read.erase();
    });

    bindConstants(module);

    SmallVector<NamedAttribute> record, targetBounds;
    for (auto param : llvm::make_early_inc_range(module.getOps<ep::ParamOp>())) {
      if (auto fact = param.getAtMostAttr()) targetBounds.emplace_back(param.getSymNameAttr(), fact);
      if (auto type = types.find(param.getSymName()); type != types.end())
        record.emplace_back(param.getSymNameAttr(), TypeAttr::get(type->second));
      else if (values.contains(param.getSymName()))
        record.emplace_back(param.getSymNameAttr(), values[param.getSymName()]);
      param.erase();
    }
    substituteTypeParameters(module, types);
    module->setAttr(ep::EpDialect::kSpecializationAttrName, DictionaryAttr::get(&getContext(), record));
    if (!targetBounds.empty())
      module->setAttr(ep::EpDialect::kTargetBoundsAttrName, DictionaryAttr::get(&getContext(), targetBounds));
    const FrozenRewritePatternSet patterns = foldingPatterns(&getContext());
    // Counts first (offsets follow from them), then the offsets, which may
    // read runtime parameters, then every read of one to the window table.
    if (failed(linearizeCounts(module, runtimeParams, patterns)) ||
        failed(bindBufferOffsets(module, patterns, runtimeParams)) ||
        failed(threadRuntimeParams(module, runtimeParams)))
      return signalPassFailure();
    if (!runtimeParams.empty()) {
      Builder builder(&getContext());
      SmallVector<Attribute> names;
      for (const std::string& name : runtimeParams) names.push_back(builder.getStringAttr(name));
      module->setAttr(ep::EpDialect::kRuntimeParamsAttrName, builder.getArrayAttr(names));
    }
    (void)applyPatternsGreedily(module, patterns);
  }

  // A kernel whose when(...) the bindings fail is erased, and then the
  // private helpers nothing calls any more; the others lose their condition.
  LogicalResult keepKernelsTheBindingsAsk(ModuleOp module, const llvm::StringMap<TypedAttr>& values) {
    bool erased = false;
    for (auto kernel : llvm::make_early_inc_range(module.getOps<ep::KernelOp>())) {
      if (kernel.getWhenClauseCount() == 0) continue;
      FailureOr<bool> holds = whenHolds(module, kernel, values);
      if (failed(holds)) return failure();
      if (!*holds) {
        kernel.erase();
        erased = true;
        continue;
      }
      kernel->setAttr(ep::EpDialect::kWhenAttrName, StringAttr::get(&getContext(), whenText(kernel)));
      kernel.removeWhenParamsAttr();
      kernel.removeWhenPredicatesAttr();
      kernel.removeWhenOperandsAttr();
    }
    if (erased) eraseUncalledHelpers(module);
    return success();
  }

  // Every clause holds (they are joined by `and`).
  FailureOr<bool> whenHolds(ModuleOp module, ep::KernelOp kernel, const llvm::StringMap<TypedAttr>& values) {
    bool holds = true;
    for (size_t i = 0; i < kernel.getWhenClauseCount(); ++i) {
      // Every clause is checked, so a wrong name is reported whatever the others say.
      FailureOr<bool> clause = clauseHolds(module, kernel, values, i);
      if (failed(clause)) return failure();
      holds = holds && *clause;
    }
    return holds;
  }

  FailureOr<bool> clauseHolds(ModuleOp module, ep::KernelOp kernel, const llvm::StringMap<TypedAttr>& values,
                              size_t clause) {
    auto valueOf = [&](StringRef name) -> FailureOr<int64_t> {
      auto it = values.find(name);
      if (it == values.end() || !isa<IntegerAttr>(it->second))
        return kernel.emitError() << "kernel @" << kernel.getSymName() << " is conditioned on '" << name
                                  << "', which is not a scalar parameter; this template's parameters are: "
                                  << parameterList(module);
      auto integer = cast<IntegerAttr>(it->second);
      return integer.getType().isInteger(1) ? int64_t(integer.getValue().getBoolValue())
                                            : integer.getValue().getSExtValue();
    };
    const StringRef paramName = kernel.getWhenClauseParam(clause);
    FailureOr<int64_t> lhs = valueOf(paramName);
    if (failed(lhs)) return failure();
    Attribute operand = kernel.getWhenClauseOperand(clause);
    if (!operand) return *lhs != 0;
    int64_t rhs = 0;
    if (auto symbol = dyn_cast<FlatSymbolRefAttr>(operand)) {
      FailureOr<int64_t> value = valueOf(symbol.getValue());
      if (failed(value)) return failure();
      rhs = *value;
    } else if (auto integer = dyn_cast<IntegerAttr>(operand)) {
      rhs = integer.getValue().getSExtValue();
    } else {
      FailureOr<int64_t> index = nameIndex(module, kernel, paramName, cast<StringAttr>(operand).getValue());
      if (failed(index)) return failure();
      rhs = *index;
    }
    const StringRef predicate = kernel.getWhenClausePredicate(clause);
    if (predicate == "eq") return *lhs == rhs;
    if (predicate == "ne") return *lhs != rhs;
    if (predicate == "lt") return *lhs < rhs;
    if (predicate == "le") return *lhs <= rhs;
    if (predicate == "gt") return *lhs > rhs;
    return *lhs >= rhs;  // "ge": the verifier admits nothing else
  }

  // The index of `name` among the parameter's names (when(@mode eq "scatter")).
  FailureOr<int64_t> nameIndex(ModuleOp module, ep::KernelOp kernel, StringRef paramName, StringRef name) {
    for (auto param : module.getOps<ep::ParamOp>()) {
      if (param.getSymName() != paramName) continue;
      if (std::optional<int64_t> index = indexOfName(param, name)) return *index;
      auto diagnostic = kernel.emitError() << "kernel @" << kernel.getSymName() << " compares '" << paramName
                                           << "' with \"" << name << "\", which is not one of its names";
      if (param.getNames())
        appendNames(diagnostic, param);
      else
        diagnostic << " (it has none: compare with an integer)";
      return diagnostic;
    }
    return kernel.emitError() << "kernel @" << kernel.getSymName() << " is conditioned on '" << paramName
                              << "', which is not a parameter";
  }

  // Until none is left: a private func.func that no operation names.
  void eraseUncalledHelpers(ModuleOp module) {
    for (bool changed = true; changed;) {
      changed = false;
      for (auto helper : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
        if (helper.isPrivate() && SymbolTable::symbolKnownUseEmpty(helper, module)) {
          helper.erase();
          changed = true;
        }
    }
  }

  // Every ep.constant_value becomes its constant; the constants are recorded
  // on the module (for the interface) and their declarations removed.
  void bindConstants(ModuleOp module) {
    llvm::StringMap<TypedAttr> constants;
    SmallVector<NamedAttribute> record;
    for (auto constant : llvm::make_early_inc_range(module.getOps<ep::ConstantOp>())) {
      constants[constant.getSymName()] = constant.getValue();
      record.emplace_back(constant.getSymNameAttr(), constant.getValue());
      constant.erase();
    }
    module.walk([&](ep::ConstantValueOp read) {
      OpBuilder builder(read);
      auto value = arith::ConstantOp::create(builder, read.getLoc(), constants[read.getConstant()]);
      read.replaceAllUsesWith(value.getResult());
      read.erase();
    });
    if (!record.empty()) module->setAttr(ep::EpDialect::kConstantsAttrName, DictionaryAttr::get(&getContext(), record));
  }

  // `warps_per_block=N` (unless a parameter has that name) sets every kernel's geometry.
  LogicalResult bindGeometry(ModuleOp module, llvm::StringMap<std::string>& requested) {
    auto it = requested.find(kWarpsPerBlock);
    if (it == requested.end()) return success();
    for (auto param : module.getOps<ep::ParamOp>())
      if (param.getSymName() == kWarpsPerBlock) return success();
    int64_t warps = 0;
    if (StringRef(it->second).getAsInteger(0, warps) || warps < 1 || warps > 32) {
      return module.emitError() << "warps_per_block takes an integer in [1, 32]; got '" << it->second << "'";
    }
    Builder builder(module.getContext());
    for (auto kernel : module.getOps<ep::KernelOp>()) kernel.setWarpsPerBlock(warps);
    requested.erase(it);
    return success();
  }
};

}  // namespace
}  // namespace epjit
