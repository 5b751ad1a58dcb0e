#include "epjit/Compiler/OfflineToolchain.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

namespace epjit::compiler {
namespace {

// A tool's path: the environment variable when set, else the default.
std::string toolPath(const char* variable, llvm::StringRef fallback) {
  if (const char* value = std::getenv(variable); value && *value) return value;
  return fallback.str();
}

std::string clang() { return toolPath("EPJIT_CLANG", EPJIT_LLVM_BIN_DIR "/clang++"); }
std::string llvmTool(llvm::StringRef name) { return std::string(EPJIT_LLVM_BIN_DIR "/") + name.str(); }
std::string nvcc() { return toolPath("EPJIT_NVCC", EPJIT_NVCC_PATH); }
std::string hostCxx() { return toolPath("EPJIT_HOST_CXX", "c++"); }

std::vector<std::string> includeFlags() {
  return {"-I", EPJIT_TARGETS_INCLUDE_DIR, "-I", EPJIT_NUMERICS_INCLUDE_DIR};
}

// Runs argv; stdout goes to `out` (when given), stderr to the log.
ToolResult run(std::vector<std::string> argv, std::string* out = nullptr) {
  ToolResult result;
  for (const std::string& arg : argv) result.command += (result.command.empty() ? "" : " ") + arg;
  llvm::ErrorOr<std::string> program =
      argv[0].find('/') == std::string::npos ? llvm::sys::findProgramByName(argv[0]) : llvm::ErrorOr<std::string>(argv[0]);
  if (!program || !llvm::sys::fs::can_execute(*program)) {
    result.log = "cannot run '" + argv[0] + "': not found or not executable";
    return result;
  }
  llvm::SmallString<128> stdoutPath, stderrPath;
  llvm::sys::fs::createTemporaryFile("epjit-tool", "out", stdoutPath);
  llvm::sys::fs::createTemporaryFile("epjit-tool", "err", stderrPath);
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(stdoutPath), llvm::StringRef(stderrPath)};
  llvm::SmallVector<llvm::StringRef> args(argv.begin(), argv.end());
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  const int status = llvm::sys::ExecuteAndWait(*program, args, std::nullopt, redirects, 0, 0, &message);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto read = [](llvm::StringRef path) {
    auto buffer = llvm::MemoryBuffer::getFile(path);
    return buffer ? (*buffer)->getBuffer().str() : std::string();
  };
  const std::string stdoutText = read(stdoutPath);
  result.log = read(stderrPath);
  if (out) *out = stdoutText;
  else result.log = stdoutText + result.log;
  if (!message.empty()) result.log += message + "\n";
  llvm::sys::fs::remove(stdoutPath);
  llvm::sys::fs::remove(stderrPath);
  result.ok = status == 0;
  return result;
}

// The optimization level of the runtime's default (EPJIT_OPT_LEVEL unset), so
// the ISA the tools show is the ISA the runtime builds.
constexpr int kOptLevel = 3;

// tool + TargetInfo's flags for `compiler` + extra + includes + -o output source.
std::vector<std::string> command(std::string tool, const TargetInfo& target, Compiler compiler,
                                 std::vector<std::string> extra, llvm::StringRef source, llvm::StringRef output) {
  std::vector<std::string> argv = {std::move(tool)};
  for (std::string& flag : compile_flags(target, compiler, kOptLevel)) argv.push_back(std::move(flag));
  for (std::string& flag : extra) argv.push_back(std::move(flag));
  for (std::string& flag : includeFlags()) argv.push_back(std::move(flag));
  argv.insert(argv.end(), {"-o", output.str(), source.str()});
  return argv;
}

std::vector<std::string> amdCompileCommand(const TargetInfo& target, llvm::StringRef source, llvm::StringRef output) {
  return command(clang(), target, Compiler::Clang, {}, source, output);
}

// mode: -cubin (with ptxas's resource report) or -ptx.
std::vector<std::string> nvccCommand(const TargetInfo& target, llvm::StringRef mode, llvm::StringRef source,
                                     llvm::StringRef output) {
  std::vector<std::string> extra = {mode.str()};
  if (mode == "-cubin") extra.push_back("-Xptxas=-v");
  return command(nvcc(), target, Compiler::Nvcc, std::move(extra), source, output);
}

// A shared object as the runtime builds it, or (asm) the same compile stopped at assembly.
std::vector<std::string> hostCommand(const TargetInfo& target, bool assembly, llvm::StringRef source,
                                     llvm::StringRef output) {
  std::vector<std::string> argv = command(hostCxx(), target, Compiler::HostCxx, {}, source, output);
  if (assembly) std::replace(argv.begin(), argv.end(), std::string("-shared"), std::string("-S"));
  return argv;
}

// "      .vgpr_count:     20" -> 20 (from llvm-readelf --notes).
int64_t metadataValue(llvm::StringRef line) {
  int64_t value = -1;
  line.split(':').second.trim().getAsInteger(0, value);
  return value;
}

// Kernel symbol sizes from `llvm-readelf -s` ("Num: Value Size Type Bind Vis Ndx Name").
void readSymbolSizes(const std::string& binary, std::vector<KernelResources>& resources) {
  std::string symbols;
  if (!run({llvmTool("llvm-readelf"), "-s", "--wide", binary}, &symbols).ok) return;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(symbols).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef> fields;
    line.split(fields, ' ', -1, false);
    if (fields.size() < 8 || fields[3] != "FUNC") continue;
    for (KernelResources& kernel : resources) {
      if (fields.back() != kernel.kernel) continue;
      fields[2].getAsInteger(0, kernel.codeBytes);
    }
  }
}

ToolResult readAmdResources(llvm::StringRef binary, std::vector<KernelResources>& resources) {
  std::string notes;
  ToolResult result = run({llvmTool("llvm-readelf"), "--notes", binary.str()}, &notes);
  if (!result.ok) return result;
  // Each kernel's metadata is a block of ".key: value" lines holding its .name.
  KernelResources current;
  auto flush = [&] {
    if (!current.kernel.empty()) resources.push_back(current);
    current = KernelResources();
  };
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(notes).split(lines, '\n');
  for (llvm::StringRef raw : lines) {
    llvm::StringRef line = raw.trim();
    if (line.starts_with("- .agpr_count:") || line.starts_with("- .args:")) flush();
    if (line.starts_with("- ")) line = line.drop_front(2);
    if (line.starts_with(".name:")) current.kernel = line.split(':').second.trim().str();
    else if (line.starts_with(".vgpr_count:")) current.vgprs = int(metadataValue(line));
    else if (line.starts_with(".sgpr_count:")) current.sgprs = int(metadataValue(line));
    else if (line.starts_with(".agpr_count:")) current.agprs = int(metadataValue(line));
    else if (line.starts_with(".group_segment_fixed_size:")) current.ldsBytes = metadataValue(line);
    else if (line.starts_with(".private_segment_fixed_size:")) current.scratchBytes = metadataValue(line);
    else if (line.starts_with(".wavefront_size:")) current.waveSize = int(metadataValue(line));
  }
  flush();
  readSymbolSizes(binary.str(), resources);
  return result;
}

// ptxas -v: "Compiling entry function 'k' for 'sm_90'", then "Used N registers"
// and "S bytes stack frame, A bytes spill stores, B bytes spill loads".
ToolResult readNvidiaResources(const TargetInfo& target, llvm::StringRef source, llvm::StringRef binary,
                               std::vector<KernelResources>& resources) {
  ToolResult result = run(nvccCommand(target, "-cubin", source, binary));
  if (!result.ok) return result;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(result.log).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    if (auto at = line.find("Compiling entry function '"); at != llvm::StringRef::npos) {
      KernelResources kernel;
      kernel.kernel = line.drop_front(at + 26).split('\'').first.str();
      resources.push_back(kernel);
    } else if (!resources.empty() && line.contains("Used ") && line.contains(" registers")) {
      line.split("Used ").second.split(' ').first.getAsInteger(10, resources.back().registers);
    } else if (!resources.empty() && line.contains("bytes stack frame")) {
      llvm::StringRef rest = line.trim();
      rest.split(' ').first.getAsInteger(10, resources.back().stackBytes);
      int64_t stores = 0, loads = 0;
      rest.split(", ").second.trim().split(' ').first.getAsInteger(10, stores);
      rest.rsplit(", ").second.trim().split(' ').first.getAsInteger(10, loads);
      resources.back().spillBytes = stores + loads;
    }
  }
  readSymbolSizes(binary.str(), resources);
  return result;
}

}  // namespace

ToolResult buildBinary(const TargetInfo& target, llvm::StringRef sourcePath, llvm::StringRef outputPath) {
  switch (target.vendor) {
    case Vendor::Amd: return run(amdCompileCommand(target, sourcePath, outputPath));
    case Vendor::Nvidia: return run(nvccCommand(target, "-cubin", sourcePath, outputPath));
    case Vendor::Cpu: return run(hostCommand(target, false, sourcePath, outputPath));
  }
  return {};
}

ToolResult disassemble(const TargetInfo& target, llvm::StringRef sourcePath, llvm::StringRef binaryPath,
                       std::string& text) {
  switch (target.vendor) {
    case Vendor::Amd: return run({llvmTool("llvm-objdump"), "-d", "--no-show-raw-insn", binaryPath.str()}, &text);
    case Vendor::Nvidia: {
      llvm::SmallString<128> ptx;
      llvm::sys::fs::createTemporaryFile("epjit-kernel", "ptx", ptx);
      ToolResult result = run(nvccCommand(target, "-ptx", sourcePath, ptx));
      if (auto buffer = llvm::MemoryBuffer::getFile(ptx); result.ok && buffer) text = (*buffer)->getBuffer().str();
      llvm::sys::fs::remove(ptx);
      return result;
    }
    case Vendor::Cpu: {
      llvm::SmallString<128> assembly;
      llvm::sys::fs::createTemporaryFile("epjit-kernel", "s", assembly);
      ToolResult result = run(hostCommand(target, true, sourcePath, assembly));
      if (auto buffer = llvm::MemoryBuffer::getFile(assembly); result.ok && buffer) text = (*buffer)->getBuffer().str();
      llvm::sys::fs::remove(assembly);
      return result;
    }
  }
  return {};
}

ToolResult readResources(const TargetInfo& target, llvm::StringRef sourcePath, llvm::StringRef binaryPath,
                         std::vector<KernelResources>& resources) {
  switch (target.vendor) {
    case Vendor::Amd: return readAmdResources(binaryPath, resources);
    case Vendor::Nvidia: return readNvidiaResources(target, sourcePath, binaryPath, resources);
    case Vendor::Cpu: {
      ToolResult result;
      result.ok = true;
      return result;
    }
  }
  return {};
}

std::string formatResources(const TargetInfo& target, const std::vector<KernelResources>& resources) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (const KernelResources& kernel : resources) {
    os << "; resources " << kernel.kernel << ":";
    if (target.is_amd()) {
      os << " wave " << kernel.waveSize << " vgpr " << kernel.vgprs << " sgpr " << kernel.sgprs << " agpr " << kernel.agprs << " lds "
         << kernel.ldsBytes << " scratch " << kernel.scratchBytes;
    } else {
      os << " registers " << kernel.registers << " spill " << kernel.spillBytes << " stack " << kernel.stackBytes;
    }
    os << " code " << kernel.codeBytes << "\n";
  }
  return text;
}

}  // namespace epjit::compiler
