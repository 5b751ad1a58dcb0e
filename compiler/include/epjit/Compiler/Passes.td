//===- Passes.td - epjit compiler passes -------------------*- tablegen -*-===//
//
// The pipeline, in order: ep-link, ep-specialize, ep-check-target,
// ep-lower-numerics, ep-lower-warp-ops, ep-record-pointer-alignment,
// ep-to-emitc; then the EmitC C++ emitter writes the source.
//
//===----------------------------------------------------------------------===//

#ifndef EPJIT_COMPILER_PASSES_TD
#define EPJIT_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

def EpLink : Pass<"ep-link", "::mlir::ModuleOp"> {
  let summary = "Link the template files a module includes into one module";
  let description = [{
    Replaces every `ep.include "NAME"` with the operations of the template
    NAME (from `search-dir`s as NAME.mlir, else the built-in templates),
    following its own includes. Each file is linked once however often it is
    included, so parts may include what they use (common declarations,
    helpers) and stay compilable alone. A symbol defined in two files is an
    error naming both; an include that names nothing lists what exists.
  }];
  let options = [
    ListOption<"searchDirs", "search-dir", "std::string",
               "directories searched for NAME.mlir before the built-in templates">,
  ];
}

def EpSpecialize : Pass<"ep-specialize", "::mlir::ModuleOp"> {
  let summary = "Bind template parameters to constants and fold";
  let description = [{
    Replaces every `ep.param_value` with the constant bound to its parameter
    (from `bind`, else the parameter's default; a parameter with `names`
    also takes one of them), checks each binding against the parameter's
    type, `min` and `multiple_of`, replaces every `ep.constant_value` with its
    named constant, removes the declarations, records the bindings as
    `ep.specialization` and the constants as `ep.constants` on the module, and
    folds (window region counts become constants). A kernel whose
    `when(...)` the bindings fail is erased, with the private helpers only it
    called; the kept kernels lose their condition. `warps_per_block=N`
    overrides every kernel's geometry. The result fully determines the kernel.
  }];
  let options = [
    ListOption<"bindings", "bind", "std::string",
               "parameter bindings, KEY=VALUE (comma-separated)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def EpCheckTarget : Pass<"ep-check-target", "::mlir::ModuleOp"> {
  let summary = "Reject what the target cannot do, naming the targets that can";
  let description = [{
    Looks `target` up in TargetInfo, records it as the module's `ep.target`,
    rejects a binding above its parameter's `at_most` target fact, and
    rejects conversions the target cannot perform (FP4 on gfx942; FP4 on
    sm90 unless the template asks for the software codec; an fp8 format the
    target's hardware does not convert) with a diagnostic that names the
    target, the feature, and the targets that have it.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "a target TargetInfo knows (epjit-compile --list-targets)">,
  ];
}

def EpLowerNumerics : Pass<"ep-lower-numerics", "::mlir::ModuleOp"> {
  let summary = "Resolve formats and pick each conversion's target primitive";
  let description = [{
    `#ep.fp8<target>` becomes the target's format (e4m3fnuz on gfx942,
    e4m3fn elsewhere), and every quantize/dequantize gets the `method` that
    implements it: v_cvt_pk_fp8_f32 with an fmed3 clamp on AMD,
    v_cvt_scalef32_pk_fp4_f32 (gfx950) or v_cvt_scalef32_pk8_fp4_f32
    (gfx1250) for FP4, cvt.rn.satfinite on sm90, the numerics.h codecs on the
    host and where a template asked for the software fallback.
  }];
}

def EpLowerWarpOps : Pass<"ep-lower-warp-ops", "::mlir::ModuleOp"> {
  let summary = "Distribute warp operations over lanes: SIMT on GPUs, lane loops on the host";
  let description = [{
    Each `ep.warp.*` op becomes loops over chunks of 16 bytes per lane with
    `ep.lane.*` primitives, for the target's wave width. SIMT: lane `i` takes
    chunks `i, i + wave, ...` (scale blocks are shared by aligned groups of
    lanes and reduced with butterflies). Lanes: the same lane structure as
    loops in one thread, with reductions combined in the same order, so a GPU
    target and the host target of the same wave width agree bit for bit.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
}

def EpRecordPointerAlignment : Pass<"ep-record-pointer-alignment", "::mlir::ModuleOp"> {
  let summary = "Record the alignment each kernel's pointer parameters must have";
  let description = [{
    Sets every kernel's `pointer_alignment`: 16 bytes for a pointer parameter
    the lowered code reads or writes with 16-byte vector accesses (a lane op
    with `aligned = true`, or a flagged row's lines), the element size for
    other pointers, 0 for scalars and the window. Each such access's pointer
    is followed through ptr_add and select to a function argument, and a
    helper's argument to what every call passes; a pointer from the window
    needs nothing. A pointer it cannot follow is an error, so the record
    never claims less than the code assumes. The interface record states the
    result as each pointer parameter's "align"; the runtime refuses an
    argument that breaks it with an error instead of a device fault.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def EpToEmitC : Pass<"ep-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Convert kernels to EmitC calling the target prelude";
  let description = [{
    Upstream func/scf/arith-to-EmitC patterns plus epjit's own: `ep` ops
    become calls into the target prelude (`epjit::...`), pointers become C
    pointers, kernels become `extern "C"` functions (`__global__` with launch
    bounds on GPUs; on the host, plus an `__epjit_host_entry` that unpacks an
    argument array), and the prelude is included.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // EPJIT_COMPILER_PASSES_TD
