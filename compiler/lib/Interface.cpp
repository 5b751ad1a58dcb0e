#include "epjit/Compiler/Interface.h"

#include "llvm/Support/JSON.h"

#include "epjit/Dialect/Ep/EpOps.h"
#include "epjit/interface_schema.h"

namespace epjit::compiler {
namespace {

using namespace mlir;
namespace json = llvm::json;

// "i32", "bf16", ...; empty for a type the record has no word for
// (schema::kElementWords).
std::string elementName(Type type) {
  std::string name;
  if (type.isBF16()) name = "bf16";
  else if (type.isF16()) name = "f16";
  else if (type.isF32()) name = "f32";
  else if (auto integer = dyn_cast<IntegerType>(type)) name = "i" + std::to_string(integer.getWidth());
  const size_t bytes = schema::element_bytes(name);
  return bytes != 0 && int64_t(bytes) == ep::elementBytes(type) ? name : std::string();
}

std::string parameterType(Type type) {
  if (auto ptr = dyn_cast<ep::PtrType>(type)) {
    const std::string element = elementName(ptr.getElementType());
    return element.empty() ? std::string() : std::string(schema::kPointerPrefix) + element + ">";
  }
  if (isa<ep::WindowType>(type)) return std::string(schema::kWindowType);
  if (isa<IndexType>(type)) return std::string(schema::kIndexType);
  if (type.isInteger(32) || type.isInteger(64) || type.isF32()) return elementName(type);
  return {};
}

// A specialization or constant value as JSON: integers, booleans, type names.
void writeValue(json::OStream& out, Attribute value) {
  if (auto integer = dyn_cast<IntegerAttr>(value)) {
    if (integer.getType().isInteger(1)) return out.value(integer.getValue().getBoolValue());
    return out.value(integer.getValue().getSExtValue());
  }
  if (auto type = dyn_cast<TypeAttr>(value)) return out.value(elementName(type.getValue()));
  out.value(nullptr);
}

// A module dictionary attribute as a JSON object, in its (sorted) order.
void writeDictionary(json::OStream& out, ModuleOp module, StringRef name) {
  out.objectBegin();
  if (auto dict = module->getAttrOfType<DictionaryAttr>(name))
    for (NamedAttribute entry : dict) out.attributeBegin(entry.getName().strref()), writeValue(out, entry.getValue()),
                                      out.attributeEnd();
  out.objectEnd();
}

}  // namespace

LogicalResult buildInterface(ModuleOp module, const TargetInfo& target, llvm::StringRef templateName,
                             std::string& text) {
  // Everything is checked before anything is written.
  for (auto kernel : module.getOps<ep::KernelOp>())
    for (auto [index, type] : llvm::enumerate(kernel.getArgumentTypes()))
      if (parameterType(type).empty())
        return kernel.emitError() << "parameter '" << kernel.getArgName(unsigned(index)) << "' has type " << type
                                  << ", which the interface record cannot state";
  for (auto region : module.getOps<ep::WindowRegionOp>()) {
    std::optional<int64_t> count = region.getConstantCount();
    if (!count)
      return region.emitError() << "the count of window region @" << region.getSymName()
                                << " is not a constant after specialization: compute it from parameters and "
                                   "named constants only";
    if (*count < 0) return region.emitError() << "window region @" << region.getSymName() << " has count " << *count;
    if (elementName(region.getElement()).empty())
      return region.emitError() << "window region @" << region.getSymName() << " holds " << region.getElement()
                                << ", which the interface record cannot state";
  }
  for (auto part : module.getOps<ep::BufferPartOp>())
    if (elementName(part.getElement()).empty())
      return part.emitError() << "buffer part @" << part.getSymName() << " holds " << part.getElement()
                              << ", which the interface record cannot state";
  FailureOr<std::vector<ep::BufferPlacement>> buffers = ep::placeBuffers(module);
  if (failed(buffers)) return failure();

  // Fields in the order a reader takes them in: what, for what, then the contract.
  llvm::raw_string_ostream os(text);
  json::OStream out(os, /*IndentSize=*/2);
  // A count the runtime completes: "count" at zero, plus "count_per"
  // coefficient times each runtime parameter's value.
  auto writeCountPer = [&](Operation* op) {
    auto per = op->getAttrOfType<DictionaryAttr>(ep::EpDialect::kCountPerAttrName);
    if (!per) return;
    out.attributeObject("count_per", [&] {
      for (NamedAttribute entry : per)
        out.attribute(entry.getName().strref(), cast<IntegerAttr>(entry.getValue()).getInt());
    });
  };
  out.object([&] {
    out.attribute("format", schema::kInterfaceFormat);
    out.attribute("template", templateName);
    out.attributeBegin("specialization");
    writeDictionary(out, module, ep::EpDialect::kSpecializationAttrName);
    out.attributeEnd();
    out.attributeArray("runtime_params", [&] {
      if (auto names = module->getAttrOfType<ArrayAttr>(ep::EpDialect::kRuntimeParamsAttrName))
        for (Attribute name : names) out.value(cast<StringAttr>(name).getValue());
    });
    out.attributeObject("target", [&] {
      out.attribute("name", std::string(target.name));
      out.attribute("vendor", std::string(target.vendor_name()));
      out.attribute("arch", std::string(target.arch));
      out.attribute("wave_size", target.wave_size);
      // Every kernel waits for the previous one on its stream at entry, so it
      // may be launched before that one ends (TargetInfo::dependent_launch).
      out.attribute("dependent_launch", target.dependent_launch);
    });
    out.attributeArray("kernels", [&] {
      for (auto kernel : module.getOps<ep::KernelOp>()) {
        out.object([&] {
          out.attribute("name", kernel.getSymName());
          out.attribute("warps_per_block", kernel.getWarpsPerBlock());
          auto when = kernel->getAttrOfType<StringAttr>(ep::EpDialect::kWhenAttrName);
          out.attribute("when", when ? when.getValue() : StringRef());
          std::optional<ArrayRef<int64_t>> alignment = kernel.getPointerAlignment();
          out.attributeArray("params", [&] {
            for (auto [index, type] : llvm::enumerate(kernel.getArgumentTypes()))
              out.object([&] {
                out.attribute("name", kernel.getArgName(unsigned(index)));
                out.attribute("type", parameterType(type));
                if (alignment && isa<ep::PtrType>(type)) out.attribute("align", (*alignment)[index]);
              });
          });
        });
      }
    });
    out.attributeArray("window_regions", [&] {
      for (auto region : module.getOps<ep::WindowRegionOp>())
        out.object([&] {
          out.attribute("name", region.getSymName());
          out.attribute("element", elementName(region.getElement()));
          out.attribute("count", *region.getConstantCount());
          writeCountPer(region);
        });
    });
    out.attributeArray("buffers", [&] {
      for (const ep::BufferPlacement& buffer : *buffers)
        out.object([&] {
          // The runtime places the parts (schema::place_part), once it knows
          // the runtime parameters' values.
          out.attribute("name", buffer.name);
          out.attributeArray("parts", [&] {
            for (auto [part, offset] : buffer.parts)
              out.object([&] {
                out.attribute("name", part.getSymName());
                out.attribute("element", elementName(part.getElement()));
                out.attribute("count", *part.getConstantCount());
                writeCountPer(part);
                out.attribute("align", part.getAlignment());
                if (auto meaning = part.getMeaning()) out.attribute("meaning", *meaning);
              });
          });
        });
    });
    out.attributeBegin("constants");
    writeDictionary(out, module, ep::EpDialect::kConstantsAttrName);
    out.attributeEnd();
  });
  os << "\n";
  return success();
}

}  // namespace epjit::compiler
