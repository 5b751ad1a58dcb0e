//===- EpTypes.td - ep dialect types -----------------------*- tablegen -*-===//

#ifndef EPJIT_DIALECT_EP_EPTYPES_TD
#define EPJIT_DIALECT_EP_EPTYPES_TD

include "epjit/Dialect/Ep/EpDialect.td"

class Ep_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Ep_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Ep_PtrType : Ep_Type<"Ptr", "ptr"> {
  let summary = "pointer to elements in global memory";
  let description = [{
    A pointer to a contiguous array of `elementType` in device global memory
    (a kernel argument, or a peer's copy of a symmetric window region).
    Element types: i8 (fp8 and packed fp4 bytes, e8m0 scales), i16, i32, i64,
    bf16, f16 and f32.

    ```mlir
    %row = ep.ptr_add %input, %offset : !ep.ptr<bf16>
    ```
  }];
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
  let genVerifyDecl = 1;
}

def Ep_RowElementParamType : Ep_Type<"RowElementParam", "row_elem"> {
  let summary = "a row element type (bf16 or f32) chosen by a template parameter";
  let description = [{
    Stands for the type bound to the type parameter of the same name; the
    template declares it with `ep.param @name : !ep.row_elem<"name">`, and
    ep-specialize replaces every use with `bf16` or `f32`. It lets one
    template serve both row types without repeating its logic.

    ```mlir
    ep.param @combine_elem : !ep.row_elem<"combine_elem">
    func.func @k(%rows: !ep.ptr<!ep.row_elem<"combine_elem">>) ...
    ```
  }];
  let parameters = (ins StringRefParameter<"the type parameter's name">:$name);
  let assemblyFormat = "`<` $name `>`";
}

def Ep_WindowType : Ep_Type<"Window", "window"> {
  let summary = "a symmetric memory window";
  let description = [{
    The local rank's view of a window allocated symmetrically on every rank
    of a communicator: `ep.peer_ptr` addresses a region of a peer's copy.
  }];
}

def Ep_HeldChunksType : Ep_Type<"HeldChunks", "held_chunks"> {
  let summary = "16-byte chunks of a row that one lane holds in registers";
  let description = [{
    What ep.lane.hold_chunks loaded for ep.lane.put_chunks to store: `unroll`
    raw 16-byte chunks (the element type does not matter to a copy).
  }];
  let parameters = (ins "int64_t":$unroll);
  let assemblyFormat = "`<` $unroll `>`";
}

def Ep_AnyPtr : Type<CPred<"::llvm::isa<::epjit::ep::PtrType>($_self)">, "!ep.ptr">;

#endif // EPJIT_DIALECT_EP_EPTYPES_TD
