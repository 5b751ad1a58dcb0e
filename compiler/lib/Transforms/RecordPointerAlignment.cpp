// ep-record-pointer-alignment: which kernel pointer parameters the lowered
// code accesses with 16-byte vectors, so the runtime can refuse a misaligned
// argument with an error instead of a device fault.
//
// ep-lower-warp-ops picks 16-byte accesses (`aligned = true`, or a flagged
// row's lines) when it can prove the address a multiple of 16 bytes from a
// pointer argument: every pointer that enters a function is taken to be a
// 16-byte aligned row start. This pass follows each such access's pointer
// back through ptr_add and select to a function argument, and a helper's
// argument on to what every call passes, until it reaches a kernel
// parameter or the window. What it cannot follow is an error: a pointer of
// unknown origin would make the record claim less than the code assumes.
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include "epjit/Compiler/Passes.h"
#include "epjit/Dialect/Ep/EpOps.h"

namespace epjit {
#define GEN_PASS_DEF_EPRECORDPOINTERALIGNMENT
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

constexpr int64_t kVectorBytes = 16;

// The pointer operands a lane op accesses with 16-byte vectors: with
// `aligned`, its rows (never a sum's scales, read one per block); a flagged
// row's 16-byte lines whatever `aligned` says (it then speaks of the source).
SmallVector<Value> vectorAccessed(Operation* op) {
  SmallVector<Value> pointers;
  auto add = [&](auto range) { llvm::append_range(pointers, range); };
  if (auto copy = dyn_cast<ep::LaneCopyChunksOp>(op)) {
    if (copy.getAligned()) pointers.push_back(copy.getSrc());
    if (copy.getAligned() || copy.getFlag()) pointers.push_back(copy.getDst());
  } else if (auto put = dyn_cast<ep::LanePutChunksOp>(op)) {
    if (put.getAligned()) pointers.push_back(put.getSrc());
    if (put.getAligned() || put.getFlag()) pointers.push_back(put.getDst());
  } else if (auto hold = dyn_cast<ep::LaneHoldChunksOp>(op)) {
    if (hold.getAligned()) pointers.push_back(hold.getSrc());
  } else if (auto fanout = dyn_cast<ep::LaneFanoutChunksOp>(op)) {
    if (fanout.getAligned()) pointers.push_back(fanout.getSrc()), add(fanout.getRows());
  } else if (auto accumulate = dyn_cast<ep::LaneAccumulateChunkOp>(op)) {
    if (accumulate.getAligned()) pointers.append({accumulate.getSrc(), accumulate.getAcc()});
  } else if (auto quantize = dyn_cast<ep::LaneQuantizeChunkOp>(op)) {
    if (quantize.getAligned()) pointers.append({quantize.getSrc(), quantize.getDst()});
  } else if (auto dequantize = dyn_cast<ep::LaneDequantizeChunkOp>(op)) {
    if (dequantize.getAligned()) pointers.append({dequantize.getSrc(), dequantize.getDst()});
  } else if (auto sum = dyn_cast<ep::LaneSumChunkOp>(op)) {
    if (sum.getAligned()) pointers.push_back(sum.getDst()), add(sum.getRows());
  } else if (auto sums = dyn_cast<ep::LaneSumChunksOp>(op)) {
    if (sums.getAligned()) pointers.push_back(sums.getDst());
    if (sums.getAligned() || sums.getFlag()) add(sums.getRows());
  }
  return pointers;
}

struct EpRecordPointerAlignment : impl::EpRecordPointerAlignmentBase<EpRecordPointerAlignment> {
  // Function arguments (entry block arguments of a kernel or a helper)
  // whose value some 16-byte access relies on.
  llvm::SetVector<BlockArgument> vectorArguments;

  // Follows `pointer` to the arguments it may come from; false (with a
  // diagnostic at `user`) when it reaches something this pass cannot follow.
  bool trace(Value pointer, Operation* user) {
    SmallVector<Value> work{pointer};
    while (!work.empty()) {
      Value value = work.pop_back_val();
      if (auto argument = dyn_cast<BlockArgument>(value)) {
        Operation* owner = argument.getOwner()->getParentOp();
        if (argument.getOwner()->isEntryBlock() && isa<ep::KernelOp, func::FuncOp>(owner)) {
          vectorArguments.insert(argument);
          continue;
        }
        user->emitError() << "a 16-byte access's pointer is a block argument of " << owner->getName()
                          << ", which ep-record-pointer-alignment cannot follow to a kernel parameter";
        return false;
      }
      Operation* def = value.getDefiningOp();
      if (isa<ep::PeerPtrOp>(def)) continue;  // the window: 256-byte aligned regions
      if (auto offset = dyn_cast<ep::PtrAddOp>(def)) {
        work.push_back(offset.getBase());
        continue;
      }
      if (auto select = dyn_cast<arith::SelectOp>(def)) {
        work.append({select.getTrueValue(), select.getFalseValue()});
        continue;
      }
      user->emitError() << "a 16-byte access's pointer comes from " << def->getName()
                        << ", which ep-record-pointer-alignment cannot follow to a kernel parameter";
      return false;
    }
    return true;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool traced = true;
    module.walk([&](Operation* op) {
      for (Value pointer : vectorAccessed(op)) traced = traced && trace(pointer, op);
    });
    if (!traced) return signalPassFailure();

    // A helper's argument stands for what each of its calls passes.
    llvm::DenseMap<func::FuncOp, SmallVector<func::CallOp>> callsOf;
    SymbolTable symbols(module);
    module.walk([&](func::CallOp call) {
      if (auto callee = symbols.lookup<func::FuncOp>(call.getCallee())) callsOf[callee].push_back(call);
    });
    for (size_t next = 0; next < vectorArguments.size(); ++next) {
      BlockArgument argument = vectorArguments[next];
      auto helper = dyn_cast<func::FuncOp>(argument.getOwner()->getParentOp());
      if (!helper) continue;
      for (func::CallOp call : callsOf.lookup(helper))
        if (!trace(call.getOperand(argument.getArgNumber()), call)) return signalPassFailure();
    }

    for (auto kernel : module.getOps<ep::KernelOp>()) {
      SmallVector<int64_t> alignment;
      for (BlockArgument argument : kernel.getBody().front().getArguments()) {
        auto pointer = dyn_cast<ep::PtrType>(argument.getType());
        if (!pointer) {
          alignment.push_back(0);
          continue;
        }
        const int64_t element = ep::elementBytes(pointer.getElementType());
        alignment.push_back(vectorArguments.contains(argument) ? std::max(kVectorBytes, element) : element);
      }
      kernel.setPointerAlignment(alignment);
    }
  }
};

}  // namespace
}  // namespace epjit
