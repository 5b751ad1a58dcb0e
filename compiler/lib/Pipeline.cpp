#include "epjit/Compiler/Pipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "epjit/Compiler/Interface.h"
#include "epjit/Compiler/Passes.h"
#include "epjit/Dialect/Ep/EpOps.h"
#include "epjit/targets/TargetInfo.h"

namespace epjit::compiler {
namespace {

using namespace mlir;

constexpr std::pair<Stage, llvm::StringLiteral> kStageNames[] = {
    {Stage::Template, "template"},         {Stage::Link, "link"},           {Stage::Specialize, "specialize"},
    {Stage::CheckTarget, "check-target"},  {Stage::LowerNumerics, "lower-numerics"},
    {Stage::LowerWarpOps, "lower-warp-ops"}, {Stage::ToEmitC, "to-emitc"},
    {Stage::Emit, "emit"},
};

void loadDialects(MLIRContext& context) {
  DialectRegistry registry;
  registry.insert<ep::EpDialect, arith::ArithDialect, scf::SCFDialect, func::FuncDialect, emitc::EmitCDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

// file:line:col for file locations (as compilers print them), else MLIR's form.
void printLocation(llvm::raw_ostream& os, Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    os << file.getFilename().getValue() << ":" << file.getLine() << ":" << file.getColumn();
    return;
  }
  os << loc;
}

// Collects diagnostics as "location: severity: message" lines.
struct DiagnosticCollector {
  explicit DiagnosticCollector(MLIRContext& context)
      : handler(&context, [this](Diagnostic& diagnostic) {
          llvm::raw_string_ostream os(text);
          printLocation(os, diagnostic.getLocation());
          os << ": "
             << (diagnostic.getSeverity() == DiagnosticSeverity::Error ? "error: " : "note: ") << diagnostic.str()
             << "\n";
          for (const Diagnostic& note : diagnostic.getNotes()) {
            printLocation(os, note.getLocation());
            os << ": note: " << note.str() << "\n";
          }
          return success();
        }) {}
  std::string text;
  ScopedDiagnosticHandler handler;
};

std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

bool dump(const CompileOptions& options, Stage stage, llvm::StringRef extension, llvm::StringRef text,
          std::string& error) {
  if (options.dumpDir.empty()) return true;
  if (std::error_code ec = llvm::sys::fs::create_directories(options.dumpDir)) {
    error = "cannot create dump directory " + options.dumpDir + ": " + ec.message();
    return false;
  }
  llvm::SmallString<256> path(options.dumpDir);
  llvm::sys::path::append(path, std::to_string(int(stage)) + "-" + stageName(stage).str() + extension.str());
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    error = "cannot write " + std::string(path) + ": " + ec.message();
    return false;
  }
  os << text;
  return true;
}

void addStagePasses(PassManager& pm, Stage stage, const CompileOptions& options) {
  switch (stage) {
    case Stage::Link: {
      EpLinkOptions link;
      link.searchDirs.assign(options.includeDirs.begin(), options.includeDirs.end());
      pm.addPass(createEpLink(link));
      break;
    }
    case Stage::Specialize: {
      EpSpecializeOptions specialize;
      specialize.bindings.assign(options.bindings.begin(), options.bindings.end());
      pm.addPass(createEpSpecialize(specialize));
      break;
    }
    case Stage::CheckTarget: pm.addPass(createEpCheckTarget(EpCheckTargetOptions{options.target})); break;
    case Stage::LowerNumerics: pm.addPass(createEpLowerNumerics()); break;
    case Stage::LowerWarpOps:
      pm.addPass(createEpLowerWarpOps());
      pm.addPass(createCanonicalizerPass());
      pm.addPass(createCSEPass());
      // Helpers whose calls folded away with a specialization's constants
      // (a std-MoE unpack in a module without std-MoE) are not emitted.
      pm.addPass(createSymbolDCEPass());
      pm.addPass(createEpRecordPointerAlignment());
      break;
    case Stage::ToEmitC: pm.addPass(createEpToEmitC()); break;
    case Stage::Template:
    case Stage::Emit: break;
  }
}

std::vector<KernelInfo> kernelsOf(ModuleOp module) {
  std::vector<KernelInfo> kernels;
  for (auto kernel : module.getOps<ep::KernelOp>())
    kernels.push_back({kernel.getSymName().str(), int64_t(kernel.getWarpsPerBlock())});
  return kernels;
}

// Parses a template without verifying it: a file that includes others refers
// to symbols they declare, so it verifies only once linked (ep-link).
OwningOpRef<ModuleOp> parseTemplate(MLIRContext& context, llvm::StringRef text, llvm::StringRef name) {
  return parseSourceString<ModuleOp>(text, ParserConfig(&context, /*verifyAfterParse=*/false), name);
}

// "ep/dispatch.mlir" -> "ep/dispatch"; a path keeps only its file's stem.
std::string templateNameOf(llvm::StringRef sourceName) {
  llvm::StringRef name = sourceName;
  name.consume_back(".mlir");
  if (findTemplate(name)) return name.str();
  return llvm::sys::path::stem(sourceName).str();
}

}  // namespace

llvm::StringRef stageName(Stage stage) {
  for (const auto& [value, name] : kStageNames)
    if (value == stage) return name;
  return "?";
}

bool parseStage(llvm::StringRef name, Stage& stage) {
  for (const auto& [value, text] : kStageNames) {
    if (text == name) {
      stage = value;
      return true;
    }
  }
  return false;
}

llvm::StringRef sourceExtension(llvm::StringRef target) {
  const TargetInfo* info = find_target(target);
  return info ? info->source_extension() : ".cpp";
}

bool compile(llvm::StringRef sourceText, llvm::StringRef sourceName, const CompileOptions& options,
             CompileOutput& output, std::string& error) {
  MLIRContext context(MLIRContext::Threading::DISABLED);
  loadDialects(context);
  context.printOpOnDiagnostic(false);
  DiagnosticCollector diagnostics(context);

  OwningOpRef<ModuleOp> module = parseTemplate(context, sourceText, sourceName);
  if (!module) {
    error = diagnostics.text;
    return false;
  }
  if (!dump(options, Stage::Template, ".mlir", printModule(*module), error)) return false;

  // The record is whole once the lowering states which pointers need 16
  // bytes; a compile that stops before it gets one after ep-check-target,
  // without "align".
  const Stage recordStage =
      int(options.stopAfter) >= int(Stage::LowerWarpOps) ? Stage::LowerWarpOps : Stage::CheckTarget;
  for (Stage stage : {Stage::Link, Stage::Specialize, Stage::CheckTarget, Stage::LowerNumerics, Stage::LowerWarpOps,
                      Stage::ToEmitC}) {
    if (int(stage) > int(options.stopAfter)) break;
    if (stage == Stage::ToEmitC) output.kernels = kernelsOf(*module);
    PassManager pm(&context);
    addStagePasses(pm, stage, options);
    if (failed(pm.run(*module))) {
      error = diagnostics.text.empty() ? "stage " + stageName(stage).str() + " failed" : diagnostics.text;
      return false;
    }
    if (stage == recordStage &&
        failed(buildInterface(*module, *find_target(options.target), templateNameOf(sourceName), output.interface))) {
      error = diagnostics.text;
      return false;
    }
    output.mlir = printModule(*module);
    if (!dump(options, stage, ".mlir", output.mlir, error)) return false;
  }
  if (options.stopAfter != Stage::Emit) return true;

  llvm::raw_string_ostream os(output.source);
  os << "// Generated by epjit from " << sourceName << " for " << options.target << "; do not edit.\n";
  if (failed(emitc::translateToCpp(*module, os))) {
    error = diagnostics.text.empty() ? "C++ emission failed" : diagnostics.text;
    return false;
  }
  return dump(options, Stage::Emit, sourceExtension(options.target), output.source, error);
}

bool describeParameters(llvm::StringRef sourceText, llvm::StringRef sourceName, std::string& description,
                        std::string& error) {
  MLIRContext context(MLIRContext::Threading::DISABLED);
  loadDialects(context);
  DiagnosticCollector diagnostics(context);
  OwningOpRef<ModuleOp> module = parseTemplate(context, sourceText, sourceName);
  PassManager pm(&context);
  pm.addPass(createEpLink());
  if (!module || failed(pm.run(*module))) {
    error = diagnostics.text;
    return false;
  }
  llvm::raw_string_ostream os(description);
  for (auto param : module->getOps<ep::ParamOp>()) {
    os << param.getSymName() << " : " << param.getType();
    llvm::SmallVector<std::string> notes;
    if (auto value = param.getDefaultValueAttr()) {
      std::string text;
      llvm::raw_string_ostream vs(text);
      if (auto integer = dyn_cast<IntegerAttr>(value)) vs << integer.getValue();
      else vs << value;
      notes.push_back("default " + text);
    }
    if (auto min = param.getMin()) notes.push_back("min " + std::to_string(*min));
    if (auto fact = param.getAtMost()) notes.push_back("at_most the target's " + fact->str());
    if (auto multiple = param.getMultipleOf()) notes.push_back("multiple_of " + std::to_string(*multiple));
    if (auto names = param.getNames())
      notes.push_back("names " + llvm::join(names->getAsValueRange<StringAttr>(), "|"));
    if (!notes.empty()) os << " (" << llvm::join(notes, ", ") << ")";
    os << "\n";
  }
  for (auto kernel : module->getOps<ep::KernelOp>()) {
    os << "kernel @" << kernel.getSymName() << " (warps_per_block " << kernel.getWarpsPerBlock() << ")";
    if (kernel.getWhenClauseCount() > 0) {  // present only for the bindings that satisfy it
      os << " when(";
      for (size_t i = 0; i < kernel.getWhenClauseCount(); ++i) {
        os << (i > 0 ? " and @" : "@") << kernel.getWhenClauseParam(i);
        if (Attribute operand = kernel.getWhenClauseOperand(i)) {
          os << " " << kernel.getWhenClausePredicate(i) << " ";
          operand.print(os, /*elideType=*/true);
        }
      }
      os << ")";
    }
    os << "\n";
  }
  return true;
}

}  // namespace epjit::compiler
