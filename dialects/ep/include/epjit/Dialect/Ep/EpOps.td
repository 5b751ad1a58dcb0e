//===- EpOps.td - ep dialect operations --------------------*- tablegen -*-===//

#ifndef EPJIT_DIALECT_EP_EPOPS_TD
#define EPJIT_DIALECT_EP_EPOPS_TD

include "epjit/Dialect/Ep/EpDialect.td"
include "epjit/Dialect/Ep/EpTypes.td"
include "epjit/Dialect/Ep/EpAttrs.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Templates: files, parameters, named constants, kernels
//===----------------------------------------------------------------------===//

def Ep_IncludeOp : Ep_Op<"include", [HasParent<"::mlir::ModuleOp">]> {
  let summary = "link another template file into this module";
  let description = [{
    Names a template of the library (`templates/<name>.mlir`). `ep-link`
    parses it, links what it includes in turn, and moves its operations into
    this module; each file is linked once however often it is included, and a
    symbol defined in two files is an error naming both.

    ```mlir
    ep.include "ep/common"
    ```
  }];
  let arguments = (ins StrAttr:$file);
  let assemblyFormat = "$file attr-dict";
}

def Ep_ParamOp : Ep_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a template parameter, bound by ep-specialize";
  let description = [{
    Declares a scalar template parameter (index, i32, i64 or i1). `default_value`
    is used when no binding is given; `multiple_of` and `min` constrain the
    values a binding may take, and ep-specialize rejects others by name.
    `names` lets a binding use a word for each value of an enumeration: with
    `names = ["none", "fp8_direct_cast"]`, `quant=fp8_direct_cast` binds 1.
    `at_most` bounds the value by a fact of the target the module is built
    for (`"wave_size"`: a lane per value, as a warp that indexes every rank
    needs); ep-check-target rejects a binding above it, naming the target.

    A `runtime` parameter (index only) may be left unbound: the kernels then
    read it from the window table (`ep.runtime_param`), so one module serves
    every value, and a window region's or buffer part's count may be linear
    in it (the interface record states the coefficients; the runtime sizes
    the window and buffers for its values). Bound, it is a constant like any
    other parameter.

    ```mlir
    ep.param @hidden : index {min = 1, multiple_of = 2}
    ep.param @max_tokens : index {min = 1, runtime}
    ep.param @warps : index {default_value = 4 : index}
    ep.param @quant : index {names = ["none", "fp8_direct_cast", "fp8_blockwise"]}
    ep.param @world : index {min = 1, at_most = "wave_size"}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                       OptionalAttr<TypedAttrInterface>:$default_value,
                       OptionalAttr<I64Attr>:$multiple_of,
                       OptionalAttr<I64Attr>:$min,
                       OptionalAttr<StrArrayAttr>:$names,
                       OptionalAttr<StrAttr>:$at_most,
                       UnitAttr:$runtime);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
}

def Ep_RuntimeParamOp : Ep_Op<"runtime_param", [Pure]> {
  let summary = "the value of an unbound runtime parameter, read from the window table";
  let description = [{
    ep-specialize writes it where a kernel reads a `runtime` parameter left
    unbound: `index` is the parameter's place in the interface record's
    `runtime_params`, which is its place in the table's runtime_param array.
    The table is a kernel argument, so the read comes from the constant cache.

    ```mlir
    %max_tokens = ep.runtime_param %window[0] : index
    ```
  }];
  let arguments = (ins Ep_WindowType:$window, I64Attr:$index);
  let results = (outs Index:$result);
  let assemblyFormat = "$window `[` $index `]` attr-dict `:` type($result)";
}

def Ep_ParamValueOp : Ep_Op<"param_value", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the value of a template parameter";
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs AnyTypeOf<[Index, I32, I64, I1]>:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

def Ep_ConstantOp : Ep_Op<"constant", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a named constant the kernels and the runtime share";
  let description = [{
    A value fixed by the template (a state word's index, an error code, a
    flag base), declared once and read by name with `ep.constant_value`.
    ep-specialize folds the reads and records every constant in the module's
    interface, which is how the runtime learns them.

    ```mlir
    ep.constant @state_error = 3 : index
    ep.constant @error_peer_timeout = 1 : i32
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypedAttrInterface:$value);
  let assemblyFormat = "$sym_name `=` $value attr-dict";
  let hasVerifier = 1;
}

def Ep_ConstantValueOp : Ep_Op<"constant_value", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the value of a named constant";
  let arguments = (ins FlatSymbolRefAttr:$constant);
  let results = (outs AnyTypeOf<[Index, I32, I64]>:$result);
  let assemblyFormat = "$constant attr-dict `:` type($result)";
}

def Ep_KernelOp : Ep_Op<"kernel", [Symbol, IsolatedFromAbove, HasParent<"::mlir::ModuleOp">,
    SingleBlockImplicitTerminator<"ReturnOp">,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "a kernel: its name, ordered parameters and launch bound are its interface";
  let description = [{
    A kernel runs on a grid of blocks of `warps_per_block` warps. Its
    parameters, in order and with the names written here, are what the
    runtime binds by name (the module's interface record): pointers
    (`!ep.ptr`), the symmetric window (`!ep.window`) and scalars (index, i32,
    i64, f32). Helpers a kernel calls are `func.func private` functions.

    ```mlir
    ep.kernel @scale_rows(%rows: !ep.ptr<bf16>, %tokens: index) warps_per_block(4) {
      ...
    }
    ```

    `when(...)` makes the kernel part of the module only for the bindings
    that satisfy it: ep-specialize erases the others, with the helpers only
    they called, so a module holds (and a JIT compiles) only what its
    configuration launches. The condition is one clause or several joined by
    `and`, all of which must hold. A clause compares a parameter with another
    parameter, an integer or one of its `names` (`eq`, `ne`, `lt`, `le`, `gt`,
    `ge`), or is an i1 parameter alone:

    ```mlir
    ep.kernel @scatter(...) warps_per_block(4) when(@combine_mode eq "scatter") { ... }
    ep.kernel @forward(...) warps_per_block(4) when(@gpu_per_node lt @world) { ... }
    ep.kernel @pack(...) warps_per_block(4) when(@std_moe) { ... }
    ep.kernel @unpack(...) warps_per_block(4) when(@std_moe and @gpu_per_node lt @world) { ... }
    ```

    Clause i is when_params[i], when_predicates[i] ("" for an i1 parameter
    alone) and when_operands[i] (a unit attribute then).

    `pointer_alignment` (set by ep-record-pointer-alignment, once the warp
    ops are lowered) holds, per parameter, the bytes an argument's address
    must be a multiple of: 16 for a pointer the kernel reads or writes with
    16-byte vector accesses, the element size for other pointers, 0 for
    non-pointers. The interface record states it as each pointer's "align".
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<FunctionType>:$function_type,
                       StrArrayAttr:$arg_names, I64Attr:$warps_per_block,
                       OptionalAttr<FlatSymbolRefArrayAttr>:$when_params,
                       OptionalAttr<StrArrayAttr>:$when_predicates,
                       OptionalAttr<ArrayAttr>:$when_operands,
                       OptionalAttr<DenseI64ArrayAttr>:$pointer_alignment);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // The comparisons when(@param PREDICATE operand) may use.
    static constexpr ::llvm::StringRef kWhenPredicates[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    ::mlir::LogicalResult verifyWhen();
    // Clause i of when(...): its parameter, its predicate ("" for an i1
    // parameter alone) and its operand (null then).
    size_t getWhenClauseCount() { return getWhenParamsAttr() ? getWhenParamsAttr().size() : 0; }
    ::llvm::StringRef getWhenClauseParam(size_t i) {
      return ::llvm::cast<::mlir::FlatSymbolRefAttr>(getWhenParamsAttr()[i]).getValue();
    }
    ::llvm::StringRef getWhenClausePredicate(size_t i) {
      return ::llvm::cast<::mlir::StringAttr>(getWhenPredicatesAttr()[i]).getValue();
    }
    ::mlir::Attribute getWhenClauseOperand(size_t i) {
      ::mlir::Attribute operand = getWhenOperandsAttr()[i];
      return ::llvm::isa<::mlir::UnitAttr>(operand) ? ::mlir::Attribute() : operand;
    }
    ::llvm::ArrayRef<::mlir::Type> getArgumentTypes() { return getFunctionType().getInputs(); }
    ::llvm::StringRef getArgName(unsigned index) {
      return ::llvm::cast<::mlir::StringAttr>(getArgNames()[index]).getValue();
    }
  }];
}

def Ep_ReturnOp : Ep_Op<"return", [Pure, Terminator, ReturnLike, HasParent<"KernelOp">]> {
  let summary = "the end of a kernel (implied when omitted)";
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Where the calling warp is (warp-uniform scalars)
//===----------------------------------------------------------------------===//

class Ep_WarpScalarOp<string mnemonic, string what> : Ep_Op<mnemonic, [Pure]> {
  let summary = what;
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Ep_WarpIndexOp : Ep_WarpScalarOp<"warp_index",
    "index of the calling warp within its block, in [0, warps_per_block)">;
def Ep_GlobalWarpIndexOp : Ep_WarpScalarOp<"global_warp_index",
    "index of the calling warp in the grid: block * warps_per_block + warp">;
def Ep_GlobalWarpCountOp : Ep_WarpScalarOp<"global_warp_count",
    "number of warps in the grid: blocks * warps_per_block">;
def Ep_BlockIndexOp : Ep_WarpScalarOp<"block_index", "index of the calling block in the grid">;
def Ep_BlockCountOp : Ep_WarpScalarOp<"block_count", "number of blocks in the grid">;

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def Ep_PtrAddOp : Ep_Op<"ptr_add", [Pure, AllTypesMatch<["base", "result"]>]> {
  let summary = "pointer plus an element offset";
  let arguments = (ins Ep_AnyPtr:$base, Index:$offset);
  let results = (outs Ep_AnyPtr:$result);
  let assemblyFormat = "$base `,` $offset attr-dict `:` type($result)";
}

def Ep_LoadOp : Ep_Op<"load", [
    TypesMatchWith<"result is the pointer's element type", "ptr", "result",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "warp-uniform scalar load: every lane reads the same element";
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$ptr, Index:$index);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$ptr `[` $index `]` attr-dict `:` type($ptr)";
}

def Ep_PrefetchOp : Ep_Op<"prefetch"> {
  let summary = "a hint: bring the line holding ptr[index] into this warp's cache";
  let description = [{
    Starts reading the line of `ptr[index]` into the nearest cache without
    waiting for it, so a later load of it (or of its neighbours) does not
    pay the round trip after whatever it depends on. No result changes:
    only caller-owned or otherwise immutable memory should be named, and a
    target without such an instruction does nothing. Declares no memory
    effects, so that it is neither erased nor moved past other memory
    operations.

    ```mlir
    ep.prefetch %indices[%first] : !ep.ptr<i32>
    ```
  }];
  let arguments = (ins Ep_AnyPtr:$ptr, Index:$index);
  let assemblyFormat = "$ptr `[` $index `]` attr-dict `:` type($ptr)";
}

def Ep_StoreOp : Ep_Op<"store", [
    TypesMatchWith<"value is the pointer's element type", "ptr", "value",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "warp-uniform scalar store (one store per warp)";
  let arguments = (ins AnyType:$value, Arg<Ep_AnyPtr, "", [MemWrite]>:$ptr, Index:$index);
  let assemblyFormat = "$value `,` $ptr `[` $index `]` attr-dict `:` type($ptr)";
}

def Ep_WindowRegionOp : Ep_Op<"window_region", [Symbol, IsolatedFromAbove, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a named region of the symmetric window: its element type and count";
  let description = [{
    Regions are numbered in declaration order. The body computes the
    region's element count from template parameters and named constants;
    after ep-specialize it folds to a constant, and the interface record
    carries every region in order with its element type and count, from
    which the runtime lays the window out. A count of 0 leaves a region
    empty in that specialization.

    ```mlir
    ep.window_region @recv_tokens : i32 {
      %capacity = ep.param_value @capacity : index
      %words = ep.param_value @token_words : index
      %count = arith.muli %capacity, %words : index
      ep.yield %count : index
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$element);
  let regions = (region SizedRegion<1>:$count);
  let assemblyFormat = "$sym_name `:` $element attr-dict-with-keyword $count";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // The folded count, once the body is a constant (after ep-specialize).
    std::optional<int64_t> getConstantCount();
  }];
}

def Ep_BufferPartOp : Ep_Op<"buffer_part", [Symbol, IsolatedFromAbove, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a part of a buffer the host allocates: its element type, count and meaning";
  let description = [{
    Declares memory outside the window that kernels and the host (or a
    framework layer above it) both read or write, such as the route map a
    dispatch records into. Parts of the same `buffer` are laid out in
    declaration order, each at the next multiple of its `align` (bytes;
    default: its element size); the buffer is one allocation. The body
    computes the part's element count from template parameters and named
    constants, as a window region's does; a count of 0 leaves the part empty.
    `meaning` says what the part holds, for the interface record's readers.

    A kernel addresses a part through `ep.buffer_offset`, so the record, the
    runtime and every layer above it follow a change to the layout here.

    ```mlir
    ep.buffer_part @route_received in "route" : i32 attributes {meaning = "tokens received"} {
      %c1 = arith.constant 1 : index
      ep.yield %c1 : index
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$buffer, TypeAttr:$element,
                       OptionalAttr<I64Attr>:$align, OptionalAttr<StrAttr>:$meaning);
  let regions = (region SizedRegion<1>:$count);
  let assemblyFormat = "$sym_name `in` $buffer `:` $element attr-dict-with-keyword $count";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // The folded count, once the body is a constant (after ep-specialize).
    std::optional<int64_t> getConstantCount();
    // The byte alignment of the part's start: `align`, else its element size.
    int64_t getAlignment();
  }];
}

def Ep_BufferOffsetOp : Ep_Op<"buffer_offset", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "where a buffer part starts in its buffer, in elements of the part";
  let description = [{
    ep-specialize replaces it with a constant once every part's count is
    known. A kernel receives the buffer's base pointer and adds this offset.

    ```mlir
    %at = ep.buffer_offset @route_received : index
    %received = ep.load %route[%at] : !ep.ptr<i32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$part);
  let results = (outs Index:$result);
  let assemblyFormat = "$part attr-dict `:` type($result)";
}

def Ep_YieldOp : Ep_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["WindowRegionOp", "BufferPartOp"]>]> {
  let summary = "the element count of a window region or a buffer part";
  let arguments = (ins Index:$count);
  let assemblyFormat = "$count attr-dict `:` type($count)";
}

def Ep_PeerPtrOp : Ep_Op<"peer_ptr", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "address of an element of a region in a peer's copy of the window";
  let description = [{
    ```mlir
    %dst = ep.peer_ptr %window[%rank] @recv_tokens[%offset] : !ep.ptr<bf16>
    ```
    The offset counts elements of the result's element type from the start
    of the region.
  }];
  let arguments = (ins Ep_WindowType:$window, Index:$rank, FlatSymbolRefAttr:$region,
                       Index:$offset);
  let results = (outs Ep_AnyPtr:$result);
  let assemblyFormat = [{
    $window `[` $rank `]` $region `[` $offset `]` attr-dict `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Synchronization
//===----------------------------------------------------------------------===//

def Ep_AtomicRmwOp : Ep_Op<"atomic_rmw", [
    TypesMatchWith<"value is the pointer's element type", "ptr", "value",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">,
    TypesMatchWith<"result is the pointer's element type", "ptr", "result",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "one atomic read-modify-write per warp; every lane gets the old value";
  let description = [{
    ```mlir
    %slot = ep.atomic_rmw add %counter[%c0], %one scope(system) order(acq_rel) : !ep.ptr<i32>
    ```
  }];
  let arguments = (ins Ep_AtomicKindAttr:$kind, Arg<Ep_AnyPtr, "", [MemRead, MemWrite]>:$ptr,
                       Index:$index, AnyTypeOf<[I32, I64]>:$value,
                       Ep_MemoryScopeAttr:$scope, Ep_MemoryOrderAttr:$order);
  let results = (outs AnyTypeOf<[I32, I64]>:$result);
  let assemblyFormat = [{
    custom<BareEnum>($kind) $ptr `[` $index `]` `,` $value
    `scope` `(` custom<BareEnum>($scope) `)` `order` `(` custom<BareEnum>($order) `)`
    attr-dict `:` type($ptr)
  }];
}

def Ep_AtomicLoadOp : Ep_Op<"atomic_load", [
    TypesMatchWith<"result is the pointer's element type", "ptr", "result",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "atomic load with scope and order";
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$ptr, Index:$index,
                       Ep_MemoryScopeAttr:$scope, Ep_MemoryOrderAttr:$order);
  let results = (outs AnyTypeOf<[I32, I64]>:$result);
  let assemblyFormat = [{
    $ptr `[` $index `]` `scope` `(` custom<BareEnum>($scope) `)`
    `order` `(` custom<BareEnum>($order) `)` attr-dict `:` type($ptr)
  }];
  let hasVerifier = 1;
}

def Ep_AtomicStoreOp : Ep_Op<"atomic_store", [
    TypesMatchWith<"value is the pointer's element type", "ptr", "value",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "atomic store with scope and order (one per warp)";
  let arguments = (ins AnyTypeOf<[I32, I64]>:$value, Arg<Ep_AnyPtr, "", [MemWrite]>:$ptr,
                       Index:$index, Ep_MemoryScopeAttr:$scope, Ep_MemoryOrderAttr:$order);
  let assemblyFormat = [{
    $value `,` $ptr `[` $index `]` `scope` `(` custom<BareEnum>($scope) `)`
    `order` `(` custom<BareEnum>($order) `)` attr-dict `:` type($ptr)
  }];
  let hasVerifier = 1;
}

def Ep_FenceOp : Ep_Op<"fence"> {
  let summary = "memory fence with scope and order";
  let arguments = (ins Ep_MemoryScopeAttr:$scope, Ep_MemoryOrderAttr:$order);
  let assemblyFormat = [{
    `scope` `(` custom<BareEnum>($scope) `)` `order` `(` custom<BareEnum>($order) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Ep_WaitUntilOp : Ep_Op<"wait_until", [
    TypesMatchWith<"value is the flag's element type", "flag", "value",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "wait, bounded in time, until a flag satisfies a predicate";
  let description = [{
    Polls `flag[index]` with acquire loads at `scope` until the predicate
    holds. It gives up, returning false, when `timeout_ms` milliseconds of
    device time have passed (the device's steady clock: `%globaltimer` on
    NVIDIA, the 100 MHz realtime counter on AMD, a steady clock on the host;
    then it stores `code`, a nonzero i32, into `error[error_index]` at system
    scope, over any other code there) or as soon as it finds `code` in
    `error[error_index]` (an earlier wait failed: a call queued behind a
    failed one fails at once instead of waiting out its own timeout). Other
    codes in the word (data errors a kernel reported) do not end a wait. It
    never hangs. `timeout_ms` below 1 counts as 1.

    ```mlir
    %ok = ep.wait_until %flags[%rank] ge %epoch scope(system) timeout_ms(%limit)
          error(%err[%c0], %timeout_code) : !ep.ptr<i32>, !ep.ptr<i32>
    ```
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$flag, Index:$index,
                       Ep_WaitPredicateAttr:$predicate, AnyTypeOf<[I32, I64]>:$value,
                       Ep_MemoryScopeAttr:$scope, I32:$timeout_ms,
                       Arg<Ep_AnyPtr, "", [MemRead, MemWrite]>:$error, Index:$error_index, I32:$code);
  let results = (outs I1:$ok);
  let assemblyFormat = [{
    $flag `[` $index `]` custom<BareEnum>($predicate) $value
    `scope` `(` custom<BareEnum>($scope) `)` `timeout_ms` `(` $timeout_ms `)`
    `error` `(` $error `[` $error_index `]` `,` $code `)` attr-dict `:` type($flag) `,` type($error)
  }];
  let hasVerifier = 1;
}

def Ep_BlockBarrierOp : Ep_Op<"block_barrier"> {
  let summary = "barrier of all warps of the calling block";
  let assemblyFormat = "attr-dict";
}

def Ep_BlockAnyOp : Ep_Op<"block_any"> {
  let summary = "barrier of the block's warps that also tells each whether any warp's predicate held";
  let description = [{
    `ep.block_barrier` with a vote: every warp of the block must reach it
    (as a barrier), each with a warp-uniform predicate, and every warp gets
    true when at least one warp passed true. What one warp decided alone
    (the last block's lead warp, once a meeting is over) then becomes the
    whole block's work; the writes before it are visible to every warp after
    it, as after a barrier. `__syncthreads_or` on NVIDIA; a word of LDS
    between three barriers on AMD (no HIP headers); a word the launcher
    gives each block, between three barriers, on the host.
  }];
  let arguments = (ins I1:$predicate);
  let results = (outs I1:$any);
  let assemblyFormat = "$predicate attr-dict";
}

def Ep_WarpBarrierOp : Ep_Op<"warp_barrier"> {
  let summary = "the calling warp's lanes meet; each sees the others' earlier writes";
  let description = [{
    What one warp op wrote, the next may read with another lane mapping: a
    warp op that reads a row an earlier one of the same warp stored (a sum
    staged, then quantized) needs this between them. `__syncwarp()` on
    NVIDIA (lanes are scheduled independently), a wavefront fence and barrier
    on AMD, nothing on the host (a warp's lanes run in order there).
  }];
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Warp operations: all lane parallelism
//===----------------------------------------------------------------------===//

def Ep_WarpCopyRowOp : Ep_Op<"warp.copy_row"> {
  let summary = "copy a row of elements, converting bf16 <-> f32 when the types differ";
  let description = [{
    ```mlir
    ep.warp.copy_row %src[%a], %dst[%b], %count : !ep.ptr<bf16> -> !ep.ptr<bf16>
    ```
    f32 -> bf16 rounds to nearest even; bf16 -> f32 is exact; equal element
    types copy bits (i8 rows move fp8/fp4 payloads and scales as bytes);
    i64 -> i32 narrows a framework's int64 ids, a value outside int32
    becoming INT32_MAX (no expert id reaches it, so it is reported as out
    of range instead of being taken for its low word).

    With `flagged(%flag)` the destination is a flagged row (the low-latency
    combine's transport, NCCL's LL): every 8 bytes of the bf16 or f32 row go
    out in a 16-byte line {data0, flag, data1, flag}, each 8-byte half one
    single-copy-atomic store, so a reader that finds the flag in a line's
    halves (ep.warp.sum_rows ... flagged) has its data without a fence or a
    signal. A flagged row of `count` elements spans 2 * count elements' bytes
    (whole lines); `dst_offset` is in the destination's elements, so element
    i of the row is at line position dst_offset + 2 * i, and it must be
    provably 16-byte aligned.

    ```mlir
    ep.warp.copy_row %src[%a], %inbox[%b2], %count flagged(%epoch) : !ep.ptr<bf16> -> !ep.ptr<bf16>
    ```
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset,
                       Arg<Ep_AnyPtr, "", [MemWrite]>:$dst, Index:$dst_offset, Index:$count,
                       Optional<I32>:$flag);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $dst `[` $dst_offset `]` `,` $count (`flagged` `(` $flag^ `)`)? attr-dict
    `:` type($src) `->` type($dst)
  }];
  let hasVerifier = 1;
}

def Ep_WarpReduceOp : Ep_Op<"warp.reduce"> {
  let summary = "reduce a row slice across the warp's lanes; every lane gets the result";
  let description = [{
    `absmax` of an empty slice is 0. Float sums use one fixed order on every
    target (per-lane partials, then a butterfly across lanes), so results are
    identical between a GPU target and the host target of the same wave width.

    ```mlir
    %amax = ep.warp.reduce absmax %row[%off], %count : !ep.ptr<bf16> -> f32
    ```
  }];
  let arguments = (ins Ep_ReduceKindAttr:$kind, Arg<Ep_AnyPtr, "", [MemRead]>:$src,
                       Index:$offset, Index:$count);
  let results = (outs F32:$result);
  let assemblyFormat = [{
    custom<BareEnum>($kind) $src `[` $offset `]` `,` $count attr-dict `:` type($src) `->` type($result)
  }];
  let hasVerifier = 1;
}

class Ep_QuantizeLikeOp<string mnemonic, string what> : Ep_Op<mnemonic, [AttrSizedOperandSegments]> {
  let summary = what;
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset,
                       Arg<Ep_AnyPtr, "", [MemRead, MemWrite]>:$dst, Index:$dst_offset,
                       Index:$count,
                       Optional<Ep_AnyPtr>:$scales, Optional<Index>:$scales_offset,
                       Optional<Index>:$scales_stride,
                       AnyAttrOf<[Ep_Fp8Attr, Ep_Fp4Attr]>:$format,
                       OptionalAttr<I64Attr>:$block, OptionalAttr<Ep_ScaleAttr>:$scale,
                       OptionalAttr<I64Attr>:$scales_group,
                       OptionalAttr<UnitAttr>:$software_fallback,
                       OptionalAttr<Ep_ConversionMethodAttr>:$method);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $dst `[` $dst_offset `]` `,` $count
    (`scales` $scales^ `[` $scales_offset `]`)? (`scales_stride` $scales_stride^)? attr-dict
    `:` type($src) `->` type($dst) (`,` type($scales)^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // Elements per scale block; 0 when the conversion has no scales.
    int64_t getBlockSize() { return getBlock() ? *getBlock() : 0; }
  }];
}

def Ep_WarpQuantizeOp : Ep_QuantizeLikeOp<"warp.quantize",
    "quantize a row (bf16 or f32) into fp8 or fp4 codes, with optional block scales"> {
  let description = [{
    Saturating conversion (docs/NUMERICS.md). Without `block`: a direct cast.
    With `block = 128, scale = #ep.scale<f32>`: fp8 blockwise. With
    `block = 32, scale = #ep.scale<e8m0>`: MX (fp4 packed two per byte,
    element 2i in the low nibble, or MXFP8). `software_fallback` lets a
    target without the hardware conversion use the numerics.h codec.

    ```mlir
    ep.warp.quantize %x[%a], %q[%b], %hidden scales %s[%c]
        {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>}
        : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
    ```
    Offsets count elements of each pointer's type: for fp4, `dst_offset` is
    in bytes (two elements each).

    Block b's scale is at `scales_offset + b` (a row's scales together), or
    with `scales_stride %s` and `scales_group = g` at
    `scales_offset + (b / g) * %s + b % g`: groups of g blocks' scales
    together, one group per stride (g = 1 is column-major scales, as DeepEP's
    [tokens, blocks] f32 view of [blocks, tokens]; g = 4 with a byte stride of
    4 * tokens is its packed UE8M0 int32 words).

    With `scale = #ep.scale<deepep>` (or `deepep_pow2`, `deepep_ue8m0`;
    block 128, `#ep.fp8<e4m3fn>`) the block's elements are multiplied by
    DeepEP's factor (numerics.h deepep_fp8_scale) and its inverse is stored.
  }];
}

def Ep_WarpDequantizeOp : Ep_QuantizeLikeOp<"warp.dequantize",
    "decode a row of fp8 or fp4 codes (times its block scales) into bf16 or f32"> {
  let description = [{
    The inverse of `ep.warp.quantize`: code value times its block's scale,
    computed in f32 and rounded once to the destination type.
  }];
}

def Ep_WarpAccumulateOp : Ep_Op<"warp.accumulate"> {
  let summary = "acc[i] += weight * src[i] in f32, lane-independent per element";
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset,
                       Arg<Ep_AnyPtr, "", [MemRead, MemWrite]>:$acc, Index:$acc_offset,
                       Index:$count, Optional<F32>:$weight);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $acc `[` $acc_offset `]` `,` $count (`weight` $weight^)?
    attr-dict `:` type($src) `->` type($acc)
  }];
  let hasVerifier = 1;
}

def Ep_WarpSumRowsOp : Ep_Op<"warp.sum_rows", [RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "dst = the f32 sum of up to `sources` rows, in source order, rounded once";
  let description = [{
    The body names source `%j` (0 <= j < sources) with `ep.source`: whether
    it counts, and its row at the summed range's first element. Every element
    is the first counting source's value, converted to f32, plus the others'
    in source order, rounded once to dst's type; with no counting source the
    range is zero-filled. With `format`, the sources are fp8 codes decoded on
    the fly (times their block's f32 scale with `block = 128, scale =
    #ep.scale<f32>`; `ep.source` then also gives the scale of the block holding
    the range's first element, which must start a block).

    With `weight` on ep.source (every source or none; bf16 or f32 rows, not
    flagged, no format) the sum is weighted as DeepEP's low-latency combine
    weights it: it starts at +0.0 and adds each counting source as a fused
    multiply-add, acc = fma(row, weight, acc), in source order, rounded once.

    `sources` is a constant once the template is specialized: the lowering
    asks for every source up front and keeps the sum in registers, each lane
    issuing all of its loads before the first add, so the reads of all the
    rows are in flight at once.

    The body runs for j = 0 .. sources - 1 in order, all of it before the
    first row is read. A body may therefore also wait (a meeting, a flag)
    once the sources are named: what it loaded to name them (a route) is in
    flight across the wait, and the rows are read after it.

    With `flagged(%flag) error(%err[%i], %code : type) timeout_ms(%limit)`
    every source is a flagged row (ep.warp.copy_row ... flagged) of bf16 or
    f32 at the summed range's first element (line position: element j of the
    range is at row + 2 * j). Each lane issues the loads of all its lines,
    then waits for each until both of its halves carry `flag`, bounded as
    ep.wait_until bounds a wait (after `timeout_ms` it stores `code` into
    `err[i]`; it gives up at once when `code` is there already), then sums.

    ```mlir
    ep.warp.sum_rows %out[%at], %n, sources(%topk) : !ep.ptr<bf16> {
    ^bb0(%j: index):
      ...
      ep.source %valid, %row : !ep.ptr<bf16>
    }
    ```
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemWrite]>:$dst, Index:$dst_offset, Index:$count, Index:$sources,
                       Optional<I32>:$flag, Optional<Ep_AnyPtr>:$error, Optional<Index>:$error_index,
                       Optional<I32>:$code, Optional<I32>:$timeout_ms,
                       OptionalAttr<Ep_Fp8Attr>:$format, OptionalAttr<I64Attr>:$block,
                       OptionalAttr<Ep_ScaleAttr>:$scale, OptionalAttr<Ep_ConversionMethodAttr>:$method);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $dst `[` $dst_offset `]` `,` $count `,` `sources` `(` $sources `)`
    (`flagged` `(` $flag^ `)` `error` `(` $error `[` $error_index `]` `,` $code `:` type($error) `)`
     `timeout_ms` `(` $timeout_ms `)`)? attr-dict `:` type($dst) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    SourceOp getSource() { return ::llvm::cast<SourceOp>(getBody().front().getTerminator()); }
  }];
}

def Ep_SourceOp : Ep_Op<"source", [Terminator, HasParent<"WarpSumRowsOp">, AttrSizedOperandSegments]> {
  let summary = "one source of an ep.warp.sum_rows: whether it counts, its row, its block scales";
  let description = [{
    In a flagged sum, `unflagged(%p)` says that when `%p` holds the row is a
    plain row (read as it lies, not awaited: the low-latency combine's
    contributions of this rank's own experts), else a flagged one.
  }];
  let arguments = (ins I1:$valid, Arg<Ep_AnyPtr, "", [MemRead]>:$row, Optional<Ep_AnyPtr>:$scales,
                       Optional<I1>:$unflagged, Optional<F32>:$weight);
  let assemblyFormat = [{
    $valid `,` $row (`scales` $scales^)? (`unflagged` `(` $unflagged^ `)`)? (`weight` $weight^)? attr-dict
    `:` type($row) (`,` type($scales)^)?
  }];
}

def Ep_WarpFanoutRowOp : Ep_Op<"warp.fanout_row", [RecursiveMemoryEffects]> {
  let summary = "copy one row to up to `destinations` rows, reading it once";
  let description = [{
    The body names destination `%j` (0 <= j < destinations) with
    `ep.destination`: whether it is written, and its row (the same element
    type as the source). Each lane loads its chunks of the source once and
    stores them to every written destination, so a row that goes to several
    places costs one read of it, with the target's copy_loads_in_flight
    loads in flight per lane.

    `destinations` is a constant once the template is specialized: the
    lowering asks for every destination up front (the body runs once per
    destination, before any copying, side effects included).

    ```mlir
    ep.warp.fanout_row %src[%at], %n, destinations(%topk) : !ep.ptr<bf16> {
    ^bb0(%j: index):
      ...
      ep.destination %live, %row : !ep.ptr<bf16>
    }
    ```
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset, Index:$count,
                       Index:$destinations);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $count `,` `destinations` `(` $destinations `)` attr-dict `:` type($src) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    DestinationOp getDestination() { return ::llvm::cast<DestinationOp>(getBody().front().getTerminator()); }
  }];
}

def Ep_DestinationOp : Ep_Op<"destination", [Terminator, HasParent<"WarpFanoutRowOp">]> {
  let summary = "one destination of an ep.warp.fanout_row: whether it is written, and its row";
  let arguments = (ins I1:$live, Arg<Ep_AnyPtr, "", [MemWrite]>:$row);
  let assemblyFormat = "$live `,` $row attr-dict `:` type($row)";
}

def Ep_WarpCopyRowAroundOp : Ep_Op<"warp.copy_row_around", [RecursiveMemoryEffects]> {
  let summary = "copy a row whose destination a body decides, the row's loads issued before the body";
  let description = [{
    The warp starts loading its chunks of the source, runs the body once
    (warp-uniformly: it may hold a block barrier, atomics, loads), then
    stores the row to the destination that the body's `ep.copy_to` names,
    if its flag is set. The row's load latency overlaps the body's: a
    dispatch's slot atomic and barrier, say. The op's results are the values
    `ep.copy_to` yields, for code after the copy.

    Each lane keeps up to the target's copy_loads_in_flight 16-byte chunks in
    registers across the body; the rest of a longer row, and the whole row on
    the host target (nothing to overlap there), is read after it. The body
    must therefore not write the source.

    ```mlir
    %slot = ep.warp.copy_row_around %src[%at], %n : !ep.ptr<i32> -> index {
      ep.block_barrier
      ...
      ep.copy_to %fits, %row : !ep.ptr<i32> yield %slot : index
    }
    ```
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset, Index:$count);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $count attr-dict `:` type($src) (`->` type($results)^)? $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    CopyToOp getCopyTo() { return ::llvm::cast<CopyToOp>(getBody().front().getTerminator()); }
  }];
}

def Ep_CopyToOp : Ep_Op<"copy_to", [Terminator, HasParent<"WarpCopyRowAroundOp">, AttrSizedOperandSegments]> {
  let summary = "the destination of an ep.warp.copy_row_around (whether written, its row) and its results";
  let description = [{
    With `flagged(%flag)` the destination is a flagged row, as for
    ep.warp.copy_row ... flagged (bf16 or f32, provably 16-byte aligned).
  }];
  let arguments = (ins I1:$live, Arg<Ep_AnyPtr, "", [MemWrite]>:$row, Optional<I32>:$flag,
                       Variadic<AnyType>:$values);
  let assemblyFormat = [{
    $live `,` $row (`flagged` `(` $flag^ `)`)? attr-dict `:` type($row) (`yield` $values^ `:` type($values))?
  }];
}

def Ep_LaneFanoutChunksOp : Ep_Op<"lane.fanout_chunks", [AttrSizedOperandSegments]> {
  let summary = "one lane copies `unroll` chunks of a row to every live destination";
  let description = [{
    ```mlir
    ep.lane.fanout_chunks %src, %count at %start stride %stride live(%l0, %l1) rows(%d0, %d1 : !ep.ptr<bf16>, !ep.ptr<bf16>)
        {chunk = 8, unroll = 8, aligned = true}
        : !ep.ptr<bf16>
    ```
    Elements [start + k * stride, + chunk) for k < unroll, each clipped to
    the row's `count` elements, are loaded once from `src` and stored to
    every destination row whose flag is set (all point at the row's first
    element).
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$count, Index:$start, Index:$stride,
                       Variadic<I1>:$live, Arg<Variadic<Ep_AnyPtr>, "", [MemWrite]>:$rows,
                       I64Attr:$chunk, I64Attr:$unroll, BoolAttr:$aligned);
  let assemblyFormat = [{
    $src `,` $count `at` $start `stride` $stride `live` `(` $live `)` `rows` `(` $rows `:` type($rows) `)`
    attr-dict `:` type($src)
  }];
}

//===----------------------------------------------------------------------===//
// Lane primitives (produced by ep-lower-warp-ops, consumed by ep-to-emitc)
//===----------------------------------------------------------------------===//

def Ep_LaneLoadOp : Ep_Op<"lane.load", [
    TypesMatchWith<"result is the pointer's element type", "ptr", "result",
                   "::llvm::cast<::epjit::ep::PtrType>($_self).getElementType()">]> {
  let summary = "a load whose address may differ between lanes (unlike ep.load)";
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$ptr, Index:$index);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$ptr `[` $index `]` attr-dict `:` type($ptr)";
}

def Ep_LaneIdOp : Ep_Op<"lane.id", [Pure]> {
  let summary = "the calling lane's index within its warp (SIMT lowering only)";
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Ep_LaneReduceOp : Ep_Op<"lane.reduce", [AllTypesMatch<["value", "result"]>]> {
  let summary = "butterfly reduction across aligned groups of `group` lanes (SIMT)";
  let arguments = (ins Ep_ReduceKindAttr:$kind, F32:$value, I64Attr:$group);
  let results = (outs F32:$result);
  let assemblyFormat = "custom<BareEnum>($kind) $value `group` `(` $group `)` attr-dict `:` type($result)";
}

def Ep_LaneChunkReduceOp : Ep_Op<"lane.chunk_reduce"> {
  let summary = "one lane's partial reduction over a chunk of at most `chunk` elements";
  let arguments = (ins Ep_ReduceKindAttr:$kind, Arg<Ep_AnyPtr, "", [MemRead]>:$src,
                       Index:$offset, Index:$count, I64Attr:$chunk);
  let results = (outs F32:$result);
  let assemblyFormat = [{
    custom<BareEnum>($kind) $src `[` $offset `]` `,` $count `chunk` `(` $chunk `)` attr-dict
    `:` type($src) `->` type($result)
  }];
}

def Ep_LaneCombineOp : Ep_Op<"lane.combine", [Pure, AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "combine two partial reductions (lanes lowering), NaN-propagating for max";
  let arguments = (ins Ep_ReduceKindAttr:$kind, F32:$lhs, F32:$rhs);
  let results = (outs F32:$result);
  let assemblyFormat = "custom<BareEnum>($kind) $lhs `,` $rhs attr-dict `:` type($result)";
}

class Ep_LaneChunkConvertOp<string mnemonic, string what> : Ep_Op<mnemonic> {
  let summary = what;
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset,
                       Arg<Ep_AnyPtr, "", [MemWrite]>:$dst, Index:$dst_offset,
                       Index:$count, Optional<AnyTypeOf<[F32, I8]>>:$scale,
                       AnyAttrOf<[Ep_Fp8Attr, Ep_Fp4Attr]>:$format,
                       Ep_ConversionMethodAttr:$method, I64Attr:$chunk, BoolAttr:$aligned,
                       // An f32 scale the values are multiplied by, not divided by (DeepEP's rule).
                       UnitAttr:$multiplies);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $dst `[` $dst_offset `]` `,` $count (`scale` $scale^ `:` type($scale))?
    attr-dict `:` type($src) `->` type($dst)
  }];
}

def Ep_LaneQuantizeChunkOp : Ep_LaneChunkConvertOp<"lane.quantize_chunk",
    "one lane quantizes at most `chunk` elements with a known scale">;
def Ep_LaneDequantizeChunkOp : Ep_LaneChunkConvertOp<"lane.dequantize_chunk",
    "one lane decodes at most `chunk` codes times a known scale">;

def Ep_LaneCopyChunksOp : Ep_Op<"lane.copy_chunks"> {
  let summary = "one lane copies (and converts) `unroll` chunks of a row";
  let description = [{
    ```mlir
    ep.lane.copy_chunks %src, %dst, %count at %start stride %stride {chunk = 8, unroll = 4, aligned = true}
        : !ep.ptr<bf16> -> !ep.ptr<bf16>
    ```
    Copies elements [start + k * stride, + chunk) for k < unroll, each
    clipped to the row's `count` elements (`src` and `dst` point at the row's
    first element). Every chunk is loaded before any is stored, so a lane
    keeps `unroll` loads in flight. With `flagged(%flag)`, `dst` is a flagged
    row (ep.warp.copy_row ... flagged) and `aligned` speaks of `src`.
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Arg<Ep_AnyPtr, "", [MemWrite]>:$dst,
                       Index:$count, Index:$start, Index:$stride, Optional<I32>:$flag,
                       I64Attr:$chunk, I64Attr:$unroll, BoolAttr:$aligned);
  let assemblyFormat = [{
    $src `,` $dst `,` $count `at` $start `stride` $stride (`flagged` `(` $flag^ `)`)? attr-dict
    `:` type($src) `->` type($dst)
  }];
}

def Ep_LaneHoldChunksOp : Ep_Op<"lane.hold_chunks"> {
  let summary = "one lane loads `unroll` chunks of a row into registers";
  let description = [{
    ```mlir
    %held = ep.lane.hold_chunks %src, %count at %start stride %stride {chunk = 4, aligned = true}
        : !ep.ptr<i32> -> !ep.held_chunks<8>
    ```
    Loads the full chunks among elements [start + k * stride, + chunk)
    (k < unroll, clipped to the row's `count` elements) with 16-byte loads
    when aligned; nothing otherwise (ep.lane.put_chunks then reads them).
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$count, Index:$start, Index:$stride,
                       I64Attr:$chunk, BoolAttr:$aligned);
  let results = (outs Ep_HeldChunksType:$held);
  let assemblyFormat = [{
    $src `,` $count `at` $start `stride` $stride attr-dict `:` type($src) `->` qualified(type($held))
  }];
}

def Ep_LanePutChunksOp : Ep_Op<"lane.put_chunks"> {
  let summary = "one lane stores the chunks it held, reading what it did not hold from the source";
  let description = [{
    ```mlir
    ep.lane.put_chunks %held, %src, %dst, %count at %start stride %stride {chunk = 4, aligned = true}
        : !ep.held_chunks<8>, !ep.ptr<i32> -> !ep.ptr<i32>
    ```
    The same chunks as the ep.lane.hold_chunks that made `held`: full ones
    from registers, a partial one (the row's end) or, unaligned, all of them
    element by element from `src`. With `flagged(%flag)`, `dst` is a flagged
    row (ep.warp.copy_row ... flagged) and `aligned` speaks of `src`.
  }];
  let arguments = (ins Ep_HeldChunksType:$held, Arg<Ep_AnyPtr, "", [MemRead]>:$src,
                       Arg<Ep_AnyPtr, "", [MemWrite]>:$dst, Index:$count, Index:$start, Index:$stride,
                       Optional<I32>:$flag, I64Attr:$chunk, BoolAttr:$aligned);
  let assemblyFormat = [{
    $held `,` $src `,` $dst `,` $count `at` $start `stride` $stride (`flagged` `(` $flag^ `)`)? attr-dict
    `:` qualified(type($held)) `,` type($src) `->` type($dst)
  }];
}

def Ep_LaneAccumulateChunkOp : Ep_Op<"lane.accumulate_chunk"> {
  let summary = "one lane accumulates at most `chunk` elements into f32";
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemRead]>:$src, Index:$src_offset,
                       Arg<Ep_AnyPtr, "", [MemRead, MemWrite]>:$acc, Index:$acc_offset,
                       Index:$count, F32:$weight, I64Attr:$chunk, BoolAttr:$aligned);
  let assemblyFormat = [{
    $src `[` $src_offset `]` `,` $acc `[` $acc_offset `]` `,` $count `weight` $weight attr-dict
    `:` type($src) `->` type($acc)
  }];
}

def Ep_LaneSumChunkOp : Ep_Op<"lane.sum_chunk", [AttrSizedOperandSegments]> {
  let summary = "one lane sums elements [start, start + count) of every source into dst";
  let description = [{
    `dst` points at the summed range's first element; every row at its
    source's. A chunk is 16 bytes of each source (`chunk` elements); each
    source is loaded before the first add; `valid` says which count. With
    `format`, rows are fp8 codes (times `scales[start / block]`).
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemWrite]>:$dst, Index:$start, Index:$count,
                       Variadic<I1>:$valid, Variadic<Ep_AnyPtr>:$rows, Variadic<Ep_AnyPtr>:$scales,
                       Variadic<F32>:$weights,
                       OptionalAttr<Ep_Fp8Attr>:$format, OptionalAttr<I64Attr>:$block,
                       OptionalAttr<Ep_ConversionMethodAttr>:$method, I64Attr:$chunk, BoolAttr:$aligned);
  let assemblyFormat = [{
    $dst `[` $start `]` `,` $count `valid` `(` $valid `)` `rows` `(` $rows `:` type($rows) `)`
    (`scales` `(` $scales^ `:` type($scales) `)`)? (`weights` `(` $weights^ `)`)? attr-dict `:` type($dst)
  }];
}

def Ep_LaneSumChunksOp : Ep_Op<"lane.sum_chunks", [AttrSizedOperandSegments]> {
  let summary = "one lane sums `unroll` chunks of a range of every source into dst";
  let description = [{
    ```mlir
    ep.lane.sum_chunks %dst[%start], %count stride %stride valid(%v0, %v1) rows(%r0, %r1 : !ep.ptr<bf16>, !ep.ptr<bf16>)
        {chunk = 8, unroll = 4, aligned = true} : !ep.ptr<bf16>
    ```
    `dst` and every row point at the summed range's first element; the range
    holds `count` elements. The lane sums elements [start + u * stride, +
    chunk) for u < unroll, each clipped to the range. A chunk is 16 bytes of
    each source (`chunk` elements); every live source of every chunk is
    loaded before the first add, so a lane keeps unroll x live sources loads
    in flight; `valid` says which sources count. With `format`, rows are fp8
    codes (times `scales[at / block]`). With `flagged`, rows are flagged rows
    awaited as ep.warp.sum_rows ... flagged says (two lines per chunk), but
    where `unflagged` (one per row, when given) holds: those are plain rows.
    With `weights` (one per row), the sum is weighted as ep.warp.sum_rows
    with weighted sources says.
  }];
  let arguments = (ins Arg<Ep_AnyPtr, "", [MemWrite]>:$dst, Index:$start, Index:$count, Index:$stride,
                       Variadic<I1>:$valid, Variadic<Ep_AnyPtr>:$rows, Variadic<Ep_AnyPtr>:$scales,
                       Variadic<F32>:$weights,
                       Optional<I32>:$flag, Optional<Ep_AnyPtr>:$error, Optional<Index>:$error_index,
                       Optional<I32>:$code, Optional<I32>:$timeout_ms, Variadic<I1>:$unflagged,
                       OptionalAttr<Ep_Fp8Attr>:$format, OptionalAttr<I64Attr>:$block,
                       OptionalAttr<Ep_ConversionMethodAttr>:$method, I64Attr:$chunk, I64Attr:$unroll,
                       BoolAttr:$aligned);
  let assemblyFormat = [{
    $dst `[` $start `]` `,` $count `stride` $stride `valid` `(` $valid `)` `rows` `(` $rows `:` type($rows) `)`
    (`scales` `(` $scales^ `:` type($scales) `)`)? (`weights` `(` $weights^ `)`)?
    (`flagged` `(` $flag^ `)` `error` `(` $error `[` $error_index `]` `,` $code `:` type($error) `)`
     `timeout_ms` `(` $timeout_ms `)`)? (`unflagged` `(` $unflagged^ `)`)? attr-dict `:` type($dst)
  }];
}

def Ep_ReduceIdentityOp : Ep_Op<"reduce_identity", [Pure]> {
  let summary = "the identity of a reduction: -inf for max, 0 for absmax and sum";
  let arguments = (ins Ep_ReduceKindAttr:$kind);
  let results = (outs F32:$result);
  let assemblyFormat = "custom<BareEnum>($kind) attr-dict `:` type($result)";
}

def Ep_MxScaleOp : Ep_Op<"mx_scale", [Pure]> {
  let summary = "the MX E8M0 scale byte of a block from its amax (numerics.h rule)";
  let arguments = (ins F32:$amax, AnyAttrOf<[Ep_Fp8Attr, Ep_Fp4Attr]>:$format);
  let results = (outs I8:$result);
  let assemblyFormat = "$amax attr-dict `:` type($result)";
}

def Ep_DeepEpScaleOp : Ep_Op<"deepep_scale", [Pure]> {
  let summary = "DeepEP's scale of a block from its amax: the stored scale and the factor elements are multiplied by";
  let description = [{
    numerics.h deepep_fp8_scale after the 1e-4 floor: for `#ep.scale<deepep>`
    amax / 448 and 448 / amax; for `deepep_pow2` the power of two 2^e at or
    above amax / 448 and 2^-e; for `deepep_ue8m0` 2^e's exponent byte (i8) and 2^-e.

    ```mlir
    %stored, %factor = ep.deepep_scale %amax {scale = #ep.scale<deepep>} : f32
    ```
  }];
  let arguments = (ins F32:$amax, Ep_ScaleAttr:$scale);
  let results = (outs AnyTypeOf<[F32, I8]>:$stored, F32:$factor);
  let assemblyFormat = "$amax attr-dict `:` type($stored)";
  let hasVerifier = 1;
}

def Ep_BlockwiseScaleOp : Ep_Op<"blockwise_scale", [Pure]> {
  let summary = "the fp8 blockwise f32 scale of a block from its amax (numerics.h rule)";
  let arguments = (ins F32:$amax, Ep_Fp8Attr:$format);
  let results = (outs F32:$result);
  let assemblyFormat = "$amax attr-dict `:` type($result)";
}

#endif // EPJIT_DIALECT_EP_EPOPS_TD
