//===- EpDialect.td - the ep DSL dialect -------------------*- tablegen -*-===//
//
// The ep dialect is the DSL in which epjit's expert-parallel kernels are
// written once and specialized per configuration and target. Control flow is
// warp-uniform; lane parallelism lives only inside explicit warp operations.
//
//===----------------------------------------------------------------------===//

#ifndef EPJIT_DIALECT_EP_EPDIALECT_TD
#define EPJIT_DIALECT_EP_EPDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Ep_Dialect : Dialect {
  let name = "ep";
  let summary = "Expert-parallel kernel DSL with warp-uniform control flow";
  let description = [{
    Kernels run on a grid of blocks of warps. Scalar values (token index,
    destination rank, slot) are the same on every lane of a warp; lane
    parallelism exists only inside `ep.warp.*` operations, whose lowering
    (`ep-lower-warp-ops`) decides how lanes share the work: SIMT on GPUs, lane
    loops of the target's wave width on the host. `ep.lane.*` operations are
    the per-lane primitives that lowering produces; templates do not use them.

    A kernel is an `ep.kernel` (named parameters, a launch bound); helpers it
    calls are `func.func private`. Template parameters are `ep.param` symbols
    read with `ep.param_value` and bound by `ep-specialize`; named constants
    are `ep.constant` symbols read with `ep.constant_value`. A template may be
    several files: `ep.include` names another, and `ep-link` merges them.
  }];
  let cppNamespace = "::epjit::ep";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    // The module attribute recording the named constants (set by ep-specialize).
    static constexpr ::llvm::StringLiteral kConstantsAttrName = "ep.constants";
    // The module attribute naming the target (set by ep-check-target).
    static constexpr ::llvm::StringLiteral kTargetAttrName = "ep.target";
    // The module attribute recording the parameter bindings (set by ep-specialize).
    static constexpr ::llvm::StringLiteral kSpecializationAttrName = "ep.specialization";
    // The parameters bounded by a target fact (ep.param's at_most), as
    // {param = "fact"} (set by ep-specialize, checked by ep-check-target).
    static constexpr ::llvm::StringLiteral kTargetBoundsAttrName = "ep.target_bounds";
    // The target facts a parameter may be bounded by.
    static constexpr ::llvm::StringLiteral kWaveSizeFact = "wave_size";
    // A kept kernel's when(...) as written (set by ep-specialize, which drops
    // the clauses), for the interface record.
    static constexpr ::llvm::StringLiteral kWhenAttrName = "ep.when";
    // The runtime parameters left unbound, in window-table order, as an
    // array of names (set by ep-specialize).
    static constexpr ::llvm::StringLiteral kRuntimeParamsAttrName = "ep.runtime_params";
    // On a window region or buffer part whose count is linear in runtime
    // parameters: {param = coefficient}; its body yields the count at zero
    // (set by ep-specialize).
    static constexpr ::llvm::StringLiteral kCountPerAttrName = "ep.count_per";
    // Set on a module once ep-lower-warp-ops ran: ep.warp.* ops are gone.
    static constexpr ::llvm::StringLiteral kLoweringAttrName = "ep.lowering";
  }];
}

class Ep_Op<string mnemonic, list<Trait> traits = []> :
    Op<Ep_Dialect, mnemonic, traits>;

#endif // EPJIT_DIALECT_EP_EPDIALECT_TD
