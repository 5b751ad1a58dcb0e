#include "mlir/Dialect/EmitC/Transforms/TypeConversions.h"

#include "EpToEmitC.h"

namespace epjit::to_emitc {

using namespace mlir;

namespace {

// How an element is stored in C: bf16 has no portable C type across nvcc,
// hipcc and host compilers, so rows of bf16 are uint16_t bit patterns.
Type storageType(Type element) {
  if (element.isBF16() || element.isF16()) return IntegerType::get(element.getContext(), 16, IntegerType::Unsigned);
  return element;
}

}  // namespace

void populateTypeConversions(TypeConverter& converter) {
  converter.addConversion([](Type type) -> std::optional<Type> {
    if (emitc::isSupportedEmitCType(type)) return type;
    return std::nullopt;
  });
  populateEmitCSizeTTypeConversions(converter);
  converter.addConversion([](ep::PtrType type) -> Type {
    return emitc::PointerType::get(storageType(type.getElementType()));
  });
  converter.addConversion([](ep::HeldChunksType type) -> Type {
    return emitc::OpaqueType::get(type.getContext(),
                                  "epjit::prim::HeldChunks<" + std::to_string(type.getUnroll()) + ">");
  });
  converter.addConversion([](ep::WindowType type) -> Type {
    return emitc::PointerType::get(emitc::OpaqueType::get(type.getContext(), "const epjit::Window"));
  });
}

std::string cTypeName(Type type) {
  if (type.isF32()) return "float";
  if (auto integer = dyn_cast<IntegerType>(type))
    return (integer.isUnsigned() ? "uint" : "int") + std::to_string(integer.getWidth()) + "_t";
  return "void";
}

Value callPrelude(OpBuilder& builder, Location loc, StringRef callee, TypeRange results, ValueRange operands,
                  ArrayRef<std::string> templateArgs) {
  ArrayAttr templateAttr;
  if (!templateArgs.empty()) {
    SmallVector<Attribute> attrs;
    for (const std::string& arg : templateArgs) attrs.push_back(emitc::OpaqueAttr::get(builder.getContext(), arg));
    templateAttr = builder.getArrayAttr(attrs);
  }
  auto call = emitc::CallOpaqueOp::create(builder, loc, results, callee, operands, ArrayAttr(), templateAttr);
  return call.getNumResults() ? call.getResult(0) : Value();
}

Value offsetPointer(OpBuilder& builder, Location loc, Value ptr, Value offset) {
  // &ptr[offset]: EmitC's pointer + integer does not take size_t offsets.
  auto pointer = cast<emitc::PointerType>(ptr.getType());
  Value element = emitc::SubscriptOp::create(builder, loc, emitc::LValueType::get(pointer.getPointee()), ptr,
                                             ValueRange{offset});
  return emitc::AddressOfOp::create(builder, loc, pointer, element);
}

std::string preludeName(ep::MemoryScope scope) {
  switch (scope) {
    case ep::MemoryScope::workgroup: return "epjit::Scope::Workgroup";
    case ep::MemoryScope::agent: return "epjit::Scope::Agent";
    case ep::MemoryScope::system: return "epjit::Scope::System";
  }
  return "";
}

std::string preludeName(ep::MemoryOrder order) {
  switch (order) {
    case ep::MemoryOrder::relaxed: return "epjit::Order::Relaxed";
    case ep::MemoryOrder::acquire: return "epjit::Order::Acquire";
    case ep::MemoryOrder::release: return "epjit::Order::Release";
    case ep::MemoryOrder::acq_rel: return "epjit::Order::AcqRel";
  }
  return "";
}

std::string preludeName(ep::ReduceKind kind) {
  switch (kind) {
    case ep::ReduceKind::max: return "epjit::Reduce::Max";
    case ep::ReduceKind::absmax: return "epjit::Reduce::AbsMax";
    case ep::ReduceKind::sum: return "epjit::Reduce::Sum";
    case ep::ReduceKind::absmaxnum: return "epjit::Reduce::AbsMaxNum";
  }
  return "";
}

std::string preludeFormatName(Attribute format) {
  if (isa<ep::Fp4KindAttr>(format)) return "epjit::MxElement::E2M1";
  switch (cast<ep::Fp8KindAttr>(format).getValue()) {
    case ep::Fp8Kind::e4m3fn: return "epjit::Fp8Format::E4M3FN";
    case ep::Fp8Kind::e4m3fnuz: return "epjit::Fp8Format::E4M3FNUZ";
    case ep::Fp8Kind::e5m2: return "epjit::Fp8Format::E5M2";
    case ep::Fp8Kind::e5m2fnuz: return "epjit::Fp8Format::E5M2FNUZ";
    case ep::Fp8Kind::target:
    case ep::Fp8Kind::target_e5m2: break;  // resolved by ep-lower-numerics
  }
  return "";
}

std::string preludeMxElement(Attribute format) {
  if (isa<ep::Fp4KindAttr>(format)) return "epjit::MxElement::E2M1";
  switch (cast<ep::Fp8KindAttr>(format).getValue()) {
    case ep::Fp8Kind::e5m2:
    case ep::Fp8Kind::e5m2fnuz: return "epjit::MxElement::E5M2";
    default: return "epjit::MxElement::E4M3";
  }
}

std::string preludeNamespace(ep::ConversionMethod method) {
  return "epjit::prim::" + stringifyEnum(method).str();
}

}  // namespace epjit::to_emitc
