// ep-link: one module from a template and the files it includes.
#include <deque>

#include "mlir/IR/Builders.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "epjit/Compiler/Passes.h"
#include "epjit/Compiler/Pipeline.h"
#include "epjit/Dialect/Ep/EpOps.h"

namespace epjit {
#define GEN_PASS_DEF_EPLINK
#include "epjit/Compiler/Passes.h.inc"

namespace {

using namespace mlir;

// The file's name for messages: its location's file, or "the template".
std::string fileOf(Operation* op) {
  if (auto file = dyn_cast<FileLineColLoc>(op->getLoc())) return file.getFilename().str();
  return "the template";
}

struct EpLink : impl::EpLinkBase<EpLink> {
  using Base::Base;

  // NAME.mlir from the search directories, else the built-in template NAME.
  std::optional<std::string> resolve(StringRef name) {
    for (const std::string& dir : searchDirs) {
      llvm::SmallString<256> path(dir);
      llvm::sys::path::append(path, name + ".mlir");
      if (auto buffer = llvm::MemoryBuffer::getFile(path)) return (*buffer)->getBuffer().str();
    }
    if (const compiler::Template* entry = compiler::findTemplate(name)) return std::string(entry->source);
    return std::nullopt;
  }

  std::string knownTemplates() {
    std::string names;
    for (const compiler::Template& entry : compiler::builtinTemplates())
      names += (names.empty() ? "" : ", ") + std::string(entry.name);
    return names;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<std::string> definedIn;  // symbol -> the file that defines it
    for (Operation& op : module.getBody()->getOperations())
      if (auto symbol = dyn_cast<SymbolOpInterface>(op)) definedIn[symbol.getName()] = fileOf(&op);

    std::deque<ep::IncludeOp> pending(module.getOps<ep::IncludeOp>().begin(), module.getOps<ep::IncludeOp>().end());
    llvm::StringSet<> linked;
    while (!pending.empty()) {
      ep::IncludeOp include = pending.front();
      pending.pop_front();
      const std::string name = include.getFile().str();
      if (linked.insert(name).second && failed(linkFile(module, include, name, definedIn, pending)))
        return signalPassFailure();
      include.erase();
    }
  }

  // Moves the operations of template `name` before `include`, in order.
  LogicalResult linkFile(ModuleOp module, ep::IncludeOp include, const std::string& name,
                         llvm::StringMap<std::string>& definedIn, std::deque<ep::IncludeOp>& pending) {
    std::optional<std::string> text = resolve(name);
    if (!text) {
      return include.emitError() << "ep.include \"" << name << "\" names no template (looked in "
                                 << (searchDirs.empty() ? std::string() : llvm::join(searchDirs, ", ") + " and ")
                                 << "the built-in templates: " << knownTemplates() << ")";
    }
    // Parts refer to symbols other parts declare: verified once linked.
    ParserConfig config(module.getContext(), /*verifyAfterParse=*/false);
    OwningOpRef<ModuleOp> part = parseSourceString<ModuleOp>(*text, config, name + ".mlir");
    if (!part) return include.emitError() << "ep.include \"" << name << "\" does not parse (see above)";
    for (Operation& op : llvm::make_early_inc_range(part->getBody()->getOperations())) {
      if (auto symbol = dyn_cast<SymbolOpInterface>(op)) {
        auto [it, fresh] = definedIn.try_emplace(symbol.getName(), name + ".mlir");
        if (!fresh) {
          return op.emitError() << "@" << symbol.getName() << " is defined in both " << it->second << " and "
                                << name << ".mlir";
        }
      }
      op.moveBefore(include);
      if (auto nested = dyn_cast<ep::IncludeOp>(op)) pending.push_back(nested);
    }
    return success();
  }
};

}  // namespace
}  // namespace epjit
