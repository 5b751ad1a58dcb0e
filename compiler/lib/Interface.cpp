#include "epjit/Compiler/Interface.h"

#include "llvm/Support/JSON.h"

#include "epjit/Dialect/Ep/EpOps.h"

namespace epjit::compiler {
namespace {

using namespace mlir;
namespace json = llvm::json;

// "i32", "bf16", ...; empty for a type the record has no word for.
std::string elementName(Type type) {
  if (type.isBF16()) return "bf16";
  if (type.isF16()) return "f16";
  if (type.isF32()) return "f32";
  if (auto integer = dyn_cast<IntegerType>(type)) return "i" + std::to_string(integer.getWidth());
  return {};
}

std::string parameterType(Type type) {
  if (auto ptr = dyn_cast<ep::PtrType>(type)) {
    const std::string element = elementName(ptr.getElementType());
    return element.empty() ? std::string() : "ptr<" + element + ">";
  }
  if (isa<ep::WindowType>(type)) return "window";
  if (isa<IndexType>(type)) return "index";
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

  // Fields in the order a reader takes them in: what, for what, then the contract.
  llvm::raw_string_ostream os(text);
  json::OStream out(os, /*IndentSize=*/2);
  out.object([&] {
    out.attribute("format", kInterfaceFormat);
    out.attribute("template", templateName);
    out.attributeBegin("specialization");
    writeDictionary(out, module, ep::EpDialect::kSpecializationAttrName);
    out.attributeEnd();
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
