#include "epjit/Compiler/Pipeline.h"

namespace epjit::compiler {
namespace {

constexpr Template kTemplates[] = {
#include "epjit/templates.inc"
};

}  // namespace

llvm::ArrayRef<Template> builtinTemplates() { return kTemplates; }

const Template* findTemplate(llvm::StringRef name) {
  for (const Template& entry : kTemplates)
    if (name == llvm::StringRef(entry.name.data(), entry.name.size())) return &entry;
  return nullptr;
}

}  // namespace epjit::compiler
