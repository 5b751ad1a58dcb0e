#include "RuntimeParams.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/SetVector.h"

#include "epjit/Dialect/Ep/EpOps.h"

namespace epjit {
namespace {

using namespace mlir;

int runtimeIndex(const std::vector<std::string>& names, StringRef name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return int(i);
  return -1;
}

bool readsRuntimeParam(Operation* scope, const std::vector<std::string>& names) {
  bool reads = false;
  scope->walk([&](ep::ParamValueOp read) {
    if (runtimeIndex(names, read.getParam()) >= 0) reads = true;
  });
  return reads;
}

// Every read of runtime parameter i in `scope` becomes the constant point[i].
void bindRuntimeReads(Operation* scope, const std::vector<std::string>& names, ArrayRef<int64_t> point) {
  scope->walk([&](ep::ParamValueOp read) {
    const int index = runtimeIndex(names, read.getParam());
    if (index < 0) return;
    OpBuilder builder(read);
    read.replaceAllUsesWith(arith::ConstantIndexOp::create(builder, read.getLoc(), point[size_t(index)]).getResult());
    read.erase();
  });
}

// Whether `scope` calls one of the helpers in `helpers`.
bool callsAny(Operation* scope, const llvm::SetVector<Operation*>& helpers) {
  bool calls = false;
  scope->walk([&](func::CallOp call) {
    if (Operation* callee = SymbolTable::lookupNearestSymbolFrom(call, call.getCalleeAttr()))
      calls = calls || helpers.contains(callee);
  });
  return calls;
}

// The count `countOp` (a window region or buffer part) yields with runtime
// parameter i set to point[i], or nothing when its body does not fold to a
// constant. The body is evaluated on a detached copy.
std::optional<int64_t> countAt(Operation* countOp, const std::vector<std::string>& names, ArrayRef<int64_t> point,
                               const FrozenRewritePatternSet& patterns) {
  Operation* copy = countOp->clone();
  bindRuntimeReads(copy, names, point);
  (void)applyPatternsGreedily(copy->getRegion(0), patterns);
  std::optional<int64_t> count;
  if (auto region = dyn_cast<ep::WindowRegionOp>(copy)) count = region.getConstantCount();
  else count = cast<ep::BufferPartOp>(copy).getConstantCount();
  copy->erase();
  return count;
}

LogicalResult linearizeCount(Operation* countOp, StringRef what, const std::vector<std::string>& names,
                             const FrozenRewritePatternSet& patterns) {
  const size_t n = names.size();
  std::vector<int64_t> point(n, 0);
  auto notConstant = [&] {
    return countOp->emitError() << "the count of " << what
                                << " does not fold to a constant for given values of its runtime parameters: "
                                   "compute it from parameters and named constants only";
  };
  const std::optional<int64_t> base = countAt(countOp, names, point, patterns);
  if (!base) return notConstant();
  std::vector<int64_t> per(n, 0);
  for (size_t i = 0; i < n; ++i) {
    point.assign(n, 0);
    point[i] = 1;
    const std::optional<int64_t> at = countAt(countOp, names, point, patterns);
    if (!at) return notConstant();
    per[i] = *at - *base;
    if (per[i] < 0)
      return countOp->emitError() << "the count of " << what << " falls as runtime parameter '" << names[i]
                                  << "' grows; a count may only grow with one";
  }
  // Two points off the axes: a product of two parameters, or a
  // parameter's square, shows there.
  for (int64_t scale : {3, 7}) {
    int64_t expected = *base;
    for (size_t i = 0; i < n; ++i) {
      point[i] = scale + 2 * int64_t(i);
      expected += per[i] * point[i];
    }
    const std::optional<int64_t> at = countAt(countOp, names, point, patterns);
    if (!at) return notConstant();
    if (*at != expected)
      return countOp->emitError() << "the count of " << what
                                  << " is not linear in the runtime parameters; the interface record states a "
                                     "count as a constant plus a multiple of each";
  }

  // The body keeps the count at zero; the coefficients ride beside it.
  bindRuntimeReads(countOp, names, std::vector<int64_t>(n, 0));
  (void)applyPatternsGreedily(countOp->getRegion(0), patterns);
  Builder builder(countOp->getContext());
  SmallVector<NamedAttribute> coefficients;
  for (size_t i = 0; i < n; ++i)
    if (per[i] != 0) coefficients.emplace_back(builder.getStringAttr(names[i]), builder.getI64IntegerAttr(per[i]));
  if (!coefficients.empty())
    countOp->setAttr(ep::EpDialect::kCountPerAttrName, builder.getDictionaryAttr(coefficients));
  return success();
}

}  // namespace

LogicalResult linearizeCounts(ModuleOp module, const std::vector<std::string>& runtimeParams,
                              const FrozenRewritePatternSet& patterns) {
  for (auto region : module.getOps<ep::WindowRegionOp>())
    if (readsRuntimeParam(region, runtimeParams) &&
        failed(linearizeCount(region, ("window region @" + region.getSymName()).str(), runtimeParams, patterns)))
      return failure();
  for (auto part : module.getOps<ep::BufferPartOp>())
    if (readsRuntimeParam(part, runtimeParams) &&
        failed(linearizeCount(part, ("buffer part @" + part.getSymName()).str(), runtimeParams, patterns)))
      return failure();
  return success();
}

LogicalResult threadRuntimeParams(ModuleOp module, const std::vector<std::string>& runtimeParams) {
  if (runtimeParams.empty()) return success();
  // The helpers that read a runtime parameter, directly or through a helper they call.
  llvm::SetVector<Operation*> needing;
  for (auto helper : module.getOps<func::FuncOp>())
    if (readsRuntimeParam(helper, runtimeParams)) needing.insert(helper);
  for (bool grew = true; grew;) {
    grew = false;
    for (auto helper : module.getOps<func::FuncOp>()) {
      if (!needing.contains(helper) && callsAny(helper, needing)) grew = needing.insert(helper);
    }
  }

  // In `scope`, `values[i]` is runtime parameter i: its reads and the calls
  // of the helpers that need them take it.
  auto bindIn = [&](Operation* scope, ArrayRef<Value> values) {
    scope->walk([&](Operation* op) {
      if (auto read = dyn_cast<ep::ParamValueOp>(op)) {
        const int index = runtimeIndex(runtimeParams, read.getParam());
        if (index < 0) return;
        read.replaceAllUsesWith(values[size_t(index)]);
        read.erase();
      } else if (auto call = dyn_cast<func::CallOp>(op)) {
        Operation* callee = SymbolTable::lookupNearestSymbolFrom(call, call.getCalleeAttr());
        if (callee && needing.contains(callee)) call.getArgOperandsMutable().append(ValueRange(values));
      }
    });
  };

  MLIRContext* context = module.getContext();
  const Type indexType = IndexType::get(context);
  for (Operation* op : needing) {
    auto helper = cast<func::FuncOp>(op);
    const unsigned first = helper.getNumArguments();
    for (size_t i = 0; i < runtimeParams.size(); ++i)
      if (failed(helper.insertArgument(first + unsigned(i), indexType, DictionaryAttr(), helper.getLoc())))
        return helper.emitError() << "cannot add runtime parameter '" << runtimeParams[i] << "' to helper @"
                                  << helper.getSymName();
    SmallVector<Value> values(helper.getArguments().drop_front(first));
    bindIn(helper, values);
  }
  for (auto kernel : module.getOps<ep::KernelOp>()) {
    if (!readsRuntimeParam(kernel, runtimeParams) && !callsAny(kernel, needing)) continue;
    Block& entry = kernel.getBody().front();
    Value window;
    for (BlockArgument argument : entry.getArguments())
      if (isa<ep::WindowType>(argument.getType())) {
        window = argument;
        break;
      }
    if (!window)
      return kernel.emitError() << "kernel @" << kernel.getSymName()
                                << " reads a runtime parameter left unbound, but takes no !ep.window to read it "
                                   "from: add a window parameter, or bind "
                                << runtimeParams.front();
    OpBuilder builder = OpBuilder::atBlockBegin(&entry);
    SmallVector<Value> values;
    for (size_t i = 0; i < runtimeParams.size(); ++i)
      values.push_back(ep::RuntimeParamOp::create(builder, kernel.getLoc(), indexType, window,
                                                  builder.getI64IntegerAttr(int64_t(i))));
    bindIn(kernel, values);
    for (Value value : values)
      if (value.use_empty()) value.getDefiningOp()->erase();
  }
  LogicalResult result = success();
  module.walk([&](ep::ParamValueOp read) {
    if (runtimeIndex(runtimeParams, read.getParam()) < 0) return;
    read.emitError() << "runtime parameter '" << read.getParam()
                     << "' is read outside a kernel, a helper and a count; bind it";
    result = failure();
  });
  return result;
}

}  // namespace epjit
