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

def Ep_Dialect : Dialect {
  let name = "ep";
  let summary = "Expert-parallel kernel DSL with warp-uniform control flow";
  let description = [{
    Kernels run on a grid of blocks of warps. Scalar values (token index,
    destination rank, slot) are the same on every lane of a warp; lane
    parallelism exists only inside warp operations, whose lowering decides how
    lanes share the work (SIMT on GPUs, lane loops on the host target).
  }];
  let cppNamespace = "::epjit::ep";
}

class Ep_Op<string mnemonic, list<Trait> traits = []> :
    Op<Ep_Dialect, mnemonic, traits>;

#endif // EPJIT_DIALECT_EP_EPDIALECT_TD
