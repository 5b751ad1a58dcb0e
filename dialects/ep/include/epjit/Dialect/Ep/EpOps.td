//===- EpOps.td - ep dialect operations --------------------*- tablegen -*-===//

#ifndef EPJIT_DIALECT_EP_EPOPS_TD
#define EPJIT_DIALECT_EP_EPOPS_TD

include "epjit/Dialect/Ep/EpDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Ep_WarpIndexOp : Ep_Op<"warp_index", [Pure]> {
  let summary = "index of the calling warp within its block";
  let description = [{
    A warp-uniform scalar: every lane of a warp sees the same value, in
    `[0, warps_per_block)`.

    ```mlir
    %warp = ep.warp_index : index
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

#endif // EPJIT_DIALECT_EP_EPOPS_TD
