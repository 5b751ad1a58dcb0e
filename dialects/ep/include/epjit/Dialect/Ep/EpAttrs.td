//===- EpAttrs.td - ep dialect attributes ------------------*- tablegen -*-===//

#ifndef EPJIT_DIALECT_EP_EPATTRS_TD
#define EPJIT_DIALECT_EP_EPATTRS_TD

include "epjit/Dialect/Ep/EpDialect.td"

// Enum attributes are written #ep.<mnemonic><keyword>, e.g. #ep.fp8<e4m3fn>.
class Ep_EnumAttr<EnumAttrInfo info, string mnemonic> : EnumAttr<Ep_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

// ------------------------------------------------------------ numerics

def Ep_Fp8Kind : I32EnumAttr<"Fp8Kind", "an fp8 format, or the target's", [
    I32EnumAttrCase<"e4m3fn", 0>, I32EnumAttrCase<"e4m3fnuz", 1>,
    I32EnumAttrCase<"e5m2", 2>, I32EnumAttrCase<"e5m2fnuz", 3>,
    // The target's E4M3 (e4m3fnuz on gfx942, e4m3fn elsewhere) and E5M2.
    I32EnumAttrCase<"target", 4>, I32EnumAttrCase<"target_e5m2", 5>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_Fp8Attr : Ep_EnumAttr<Ep_Fp8Kind, "fp8"> {
  let summary = "an fp8 element format: #ep.fp8<e4m3fn|e4m3fnuz|e5m2|e5m2fnuz|target|target_e5m2>";
}

def Ep_Fp4Kind : I32EnumAttr<"Fp4Kind", "an fp4 format", [I32EnumAttrCase<"e2m1", 0>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_Fp4Attr : Ep_EnumAttr<Ep_Fp4Kind, "fp4"> {
  let summary = "an fp4 element format: #ep.fp4<e2m1>";
}

def Ep_ScaleKind : I32EnumAttr<"ScaleKind", "a block scale format", [
    I32EnumAttrCase<"f32", 0>, I32EnumAttrCase<"e8m0", 1>,
    // DeepEP's per-128 cast to OCP E4M3 (quantize only; numerics.h
    // deepep_fp8_scale): amax at least 1e-4 with NaN ignored, elements
    // multiplied by 448 / amax (deepep) or by a power of two (deepep_pow2,
    // deepep_ue8m0); the stored scale is amax / 448, that power of two as f32,
    // or its exponent byte (deepep_ue8m0).
    I32EnumAttrCase<"deepep", 2>, I32EnumAttrCase<"deepep_pow2", 3>, I32EnumAttrCase<"deepep_ue8m0", 4>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_ScaleAttr : Ep_EnumAttr<Ep_ScaleKind, "scale"> {
  let summary = "block scale format: #ep.scale<f32> (fp8 blockwise), #ep.scale<e8m0> (MX) or "
                "#ep.scale<deepep|deepep_pow2|deepep_ue8m0> (DeepEP's per-128 cast)";
}

// How a conversion is carried out on the target (chosen by ep-lower-numerics).
def Ep_ConversionMethod : I32EnumAttr<"ConversionMethod", "conversion primitive", [
    // The numerics.h codecs: the host target, and fallbacks a template asked for.
    I32EnumAttrCase<"software", 0>,
    // v_cvt_pk_fp8_f32 / v_cvt_pk_f32_fp8 with an explicit fmed3 clamp (gfx942 FNUZ, gfx950/gfx1250 OCP).
    I32EnumAttrCase<"amdgcn_pk_fp8", 1>,
    // gfx950 v_cvt_scalef32_pk_fp4_f32: two values per instruction, four per dword.
    I32EnumAttrCase<"amdgcn_scalef32_pk_fp4", 2>,
    // gfx1250 v_cvt_scalef32_pk8_fp4_f32: eight values per instruction.
    I32EnumAttrCase<"amdgcn_scalef32_pk8_fp4", 3>,
    // sm90 and sm100 cvt.rn.satfinite.e4m3x2.f32 / e5m2x2 (operands swapped: a is the high byte).
    I32EnumAttrCase<"ptx_cvt_satfinite", 4>,
    // sm100a cvt.rn.satfinite.e2m1x2.f32 / cvt.rn.f16x2.e2m1x2: FP4 two values per instruction.
    I32EnumAttrCase<"ptx_cvt_e2m1x2", 5>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_ConversionMethodAttr : Ep_EnumAttr<Ep_ConversionMethod, "method">;

// ------------------------------------------------------------ memory model

def Ep_MemoryScope : I32EnumAttr<"MemoryScope", "who must observe an atomic or fence", [
    I32EnumAttrCase<"workgroup", 0>, I32EnumAttrCase<"agent", 1>, I32EnumAttrCase<"system", 2>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_MemoryScopeAttr : Ep_EnumAttr<Ep_MemoryScope, "scope">;

def Ep_MemoryOrder : I32EnumAttr<"MemoryOrder", "memory ordering", [
    I32EnumAttrCase<"relaxed", 0>, I32EnumAttrCase<"acquire", 1>,
    I32EnumAttrCase<"release", 2>, I32EnumAttrCase<"acq_rel", 3>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_MemoryOrderAttr : Ep_EnumAttr<Ep_MemoryOrder, "order">;

def Ep_AtomicKind : I32EnumAttr<"AtomicKind", "atomic read-modify-write", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"max", 1>, I32EnumAttrCase<"exchange", 2>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_AtomicKindAttr : Ep_EnumAttr<Ep_AtomicKind, "atomic">;

def Ep_WaitPredicate : I32EnumAttr<"WaitPredicate", "what a wait waits for", [
    I32EnumAttrCase<"eq", 0>, I32EnumAttrCase<"ne", 1>, I32EnumAttrCase<"ge", 2>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_WaitPredicateAttr : Ep_EnumAttr<Ep_WaitPredicate, "until">;

def Ep_ReduceKind : I32EnumAttr<"ReduceKind", "lane reduction", [
    I32EnumAttrCase<"max", 0>, I32EnumAttrCase<"absmax", 1>, I32EnumAttrCase<"sum", 2>,
    // absmax with NaN ignored, as fmaxf does (DeepEP's amax); 0 when every element is NaN.
    I32EnumAttrCase<"absmaxnum", 3>]> {
  let cppNamespace = "::epjit::ep";
  let genSpecializedAttr = 0;
}
def Ep_ReduceKindAttr : Ep_EnumAttr<Ep_ReduceKind, "reduce">;

#endif // EPJIT_DIALECT_EP_EPATTRS_TD
