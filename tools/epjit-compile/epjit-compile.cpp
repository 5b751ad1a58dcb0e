// epjit-compile: the compiler's command line.
//
//   epjit-compile (--template NAME | --input FILE.mlir) [--set KEY=VALUE]...
//                 --target T --emit mlir|hip|interface|bin|asm [-o FILE] [--dump-stages DIR]
//   epjit-compile --template list
//   epjit-compile --list-targets
#include <cstdlib>

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "epjit/Compiler/OfflineToolchain.h"
#include "epjit/Compiler/Pipeline.h"
#include "epjit/build_info.h"
#include "epjit/targets/TargetInfo.h"

namespace cl = llvm::cl;
using namespace epjit;

namespace {

cl::OptionCategory category("epjit-compile options");
cl::opt<std::string> templateName("template", cl::desc("built-in template to compile, or 'list'"),
                                  cl::value_desc("NAME"), cl::cat(category));
cl::opt<std::string> inputFile("input", cl::desc("a template file to compile"), cl::value_desc("FILE.mlir"),
                               cl::cat(category));
cl::list<std::string> bindings("set", cl::desc("bind a template parameter"), cl::value_desc("KEY=VALUE"),
                               cl::cat(category));
cl::opt<std::string> target("target", cl::desc("target (--list-targets shows them)"), cl::value_desc("T"),
                            cl::cat(category));
cl::opt<bool> listTargets("list-targets", cl::desc("print the targets and their facts, then exit"),
                          cl::cat(category));
cl::opt<std::string> emit("emit",
                          cl::desc("what to write: mlir, hip (the emitted C++), interface (the interface record, "
                                   "JSON), bin, asm"),
                          cl::value_desc("KIND"), cl::init("hip"), cl::cat(category));
cl::list<std::string> includeDirs("include-dir",
                                  cl::desc("a directory ep.include searches (NAME.mlir) before the built-in "
                                           "templates; --input's own directory is searched first"),
                                  cl::value_desc("DIR"), cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("output file (default: stdout; bin: NAME.co/.cubin/.so)"),
                                cl::value_desc("FILE"), cl::cat(category));
cl::opt<std::string> dumpDir("dump-stages", cl::desc("write every pipeline stage into DIR"),
                             cl::value_desc("DIR"), cl::cat(category));
cl::opt<std::string> stopAfter("stop-after-stage", cl::desc("with --emit mlir: the last pipeline stage to run (default lower-warp-ops)"),
                               cl::value_desc("STAGE"), cl::init("lower-warp-ops"), cl::cat(category));

[[noreturn]] void fail(const llvm::Twine& message) {
  llvm::errs() << "epjit-compile: error: " << message << "\n";
  std::exit(1);
}

void listTemplates() {
  for (const compiler::Template& entry : compiler::builtinTemplates()) {
    std::string description, error;
    if (!compiler::describeParameters(llvm::StringRef(entry.source.data(), entry.source.size()),
                                      std::string(entry.name) + ".mlir", description, error))
      fail("built-in template " + std::string(entry.name) + " does not parse: " + error);
    llvm::outs() << entry.name << "\n";
    llvm::SmallVector<llvm::StringRef> lines;
    llvm::StringRef(description).split(lines, '\n', -1, false);
    for (llvm::StringRef line : lines) llvm::outs() << "  " << line << "\n";
  }
}

// One line per target: name, vendor, arch, wave size, fp8, fp4.
void printTargets() {
  for (const TargetInfo& info : all_targets()) {
    llvm::outs() << info.name << ": vendor " << info.vendor_name() << ", arch " << info.arch << ", wave "
                 << info.wave_size << ", fp8 " << fp8_format_name(info.fp8_e4m3) << ", fp4 "
                 << (info.converts_fp4_in_hardware() ? "hardware"
                     : info.has_fp4()                ? "software"
                                                     : "none")
                 << ", numerics of " << info.numerics_of << "\n";
  }
}

std::string stageNames() {
  std::string names;
  for (compiler::Stage stage : {compiler::Stage::Link, compiler::Stage::Specialize, compiler::Stage::CheckTarget,
                                compiler::Stage::LowerNumerics, compiler::Stage::LowerWarpOps, compiler::Stage::ToEmitC})
    names += (names.empty() ? "" : ", ") + compiler::stageName(stage).str();
  return names;
}

void writeText(llvm::StringRef text) {
  if (outputFile.empty() || outputFile == "-") {
    llvm::outs() << text;
    return;
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(outputFile, ec);
  if (ec) fail("cannot write " + outputFile + ": " + ec.message());
  os << text;
}

std::string temporaryPath(llvm::StringRef stem, llvm::StringRef extension) {
  llvm::SmallString<128> path;
  if (llvm::sys::fs::createTemporaryFile(stem, extension.drop_front(), path)) fail("cannot create a temporary file");
  return std::string(path);
}

void writeFile(const std::string& path, llvm::StringRef text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) fail("cannot write " + path + ": " + ec.message());
  os << text;
}

}  // namespace

int main(int argc, char** argv) {
  cl::HideUnrelatedOptions(category);
  cl::AddExtraVersionPrinter([](llvm::raw_ostream& os) {
    os << "epjit " << EPJIT_VERSION << " (" << EPJIT_GIT_REVISION << ")\n";
  });
  cl::ParseCommandLineOptions(argc, argv, "epjit-compile: ep DSL templates to per-target code\n");

  if (templateName == "list") {
    listTemplates();
    return 0;
  }
  if (listTargets) {
    printTargets();
    return 0;
  }
  if (templateName.empty() == inputFile.empty()) fail("give exactly one of --template NAME and --input FILE.mlir");
  if (target.empty()) fail("--target is required; targets: " + target_names());
  const TargetInfo* info = find_target(target);
  if (!info) fail("unknown target '" + target + "'; targets: " + target_names());
  if (emit != "mlir" && emit != "hip" && emit != "interface" && emit != "bin" && emit != "asm")
    fail("--emit takes mlir, hip, interface, bin or asm; got '" + emit + "'");

  std::string sourceText, sourceName;
  if (!templateName.empty()) {
    const compiler::Template* entry = compiler::findTemplate(templateName);
    if (!entry) {
      std::string names;
      for (const compiler::Template& t : compiler::builtinTemplates()) names += (names.empty() ? "" : ", ") + std::string(t.name);
      fail("unknown template '" + templateName + "'; templates: " + names);
    }
    sourceText = std::string(entry->source);
    sourceName = std::string(entry->name) + ".mlir";
  } else {
    auto buffer = llvm::MemoryBuffer::getFile(inputFile);
    if (!buffer) fail("cannot read " + inputFile + ": " + buffer.getError().message());
    sourceText = (*buffer)->getBuffer().str();
    sourceName = inputFile;
  }

  compiler::CompileOptions options;
  options.target = target;
  options.bindings.assign(bindings.begin(), bindings.end());
  if (!inputFile.empty()) {
    const llvm::StringRef dir = llvm::sys::path::parent_path(inputFile);
    options.includeDirs.push_back(dir.empty() ? "." : dir.str());
  }
  options.includeDirs.insert(options.includeDirs.end(), includeDirs.begin(), includeDirs.end());
  options.dumpDir = dumpDir;
  if (emit == "mlir" && !compiler::parseStage(stopAfter, options.stopAfter))
    fail("--stop-after-stage takes a stage name (" + stageNames() + "); got '" + stopAfter + "'");
  // The record is whole once the warp ops are lowered (each pointer's "align").
  if (emit == "interface") options.stopAfter = compiler::Stage::LowerWarpOps;

  compiler::CompileOutput output;
  std::string error;
  if (!compiler::compile(sourceText, sourceName, options, output, error)) {
    llvm::errs() << error;
    return 1;
  }
  if (emit == "mlir") {
    writeText(output.mlir);
    return 0;
  }
  if (emit == "hip") {
    writeText(output.source);
    return 0;
  }
  if (emit == "interface") {
    writeText(output.interface);
    return 0;
  }

  const std::string stem = llvm::sys::path::stem(sourceName).str();
  const std::string sourcePath = temporaryPath("epjit-" + stem, compiler::sourceExtension(target));
  writeFile(sourcePath, output.source);
  const bool keepBinary = emit == "bin";
  const std::string binaryPath = keepBinary ? (outputFile.empty() ? stem + std::string(info->binary_extension()) : std::string(outputFile))
                                            : temporaryPath("epjit-" + stem, std::string(info->binary_extension()));
  compiler::ToolResult built = compiler::buildBinary(*info, sourcePath, binaryPath);
  if (!built.ok) {
    llvm::errs() << built.log;
    llvm::sys::fs::remove(sourcePath);
    fail("compiling the emitted source for " + target + " failed: " + built.command);
  }
  if (emit == "asm") {
    std::string text;
    compiler::ToolResult disassembled = compiler::disassemble(*info, sourcePath, binaryPath, text);
    if (!disassembled.ok) fail("disassembly failed: " + disassembled.log);
    std::vector<compiler::KernelResources> resources;
    compiler::ToolResult read = compiler::readResources(*info, sourcePath, binaryPath, resources);
    if (!read.ok) fail("reading resource usage failed: " + read.log);
    writeText(text + compiler::formatResources(*info, resources));
    llvm::sys::fs::remove(binaryPath);
  }
  llvm::sys::fs::remove(sourcePath);
  return 0;
}
