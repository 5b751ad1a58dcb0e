// Offline compilation of emitted source, for tools (epjit-compile): clang-22
// for AMD code objects, nvcc for sm90 cubins and PTX, the host C++ compiler
// for shared objects; plus disassembly and per-kernel resource usage. The
// runtime has its own toolchains (hipRTC, NVRTC, ...); this is for
// inspection and the ISA tests.
#pragma once

#include <string>
#include <vector>

#include "llvm/ADT/StringRef.h"

#include "epjit/targets/TargetInfo.h"

namespace epjit::compiler {

struct ToolResult {
  bool ok = false;
  std::string log;      // what the tool printed (errors, ptxas -v, ...)
  std::string command;  // the command line, for messages
  double seconds = 0;
};

// Compiles `sourcePath` (emitted by the pipeline) to `outputPath`: an AMD code
// object, an sm_90 cubin, or a host shared object.
ToolResult buildBinary(const TargetInfo& target, llvm::StringRef sourcePath, llvm::StringRef outputPath);

// The disassembly of a binary (llvm-objdump for AMD, PTX for sm90 (from the
// source), the host compiler's assembly for host).
ToolResult disassemble(const TargetInfo& target, llvm::StringRef sourcePath, llvm::StringRef binaryPath,
                       std::string& text);

struct KernelResources {
  std::string kernel;
  // AMD: from the code object's metadata notes.
  int vgprs = -1, sgprs = -1, agprs = -1, waveSize = -1;
  int64_t ldsBytes = -1, scratchBytes = -1;
  // sm90: from ptxas -v.
  int registers = -1;
  int64_t spillBytes = -1, stackBytes = -1;
  int64_t codeBytes = -1;  // size of the kernel's symbol
};

// Resource usage per kernel of a built binary.
ToolResult readResources(const TargetInfo& target, llvm::StringRef sourcePath, llvm::StringRef binaryPath,
                         std::vector<KernelResources>& resources);

// One line per kernel, e.g.
// "; resources quantize_mxfp4: wave 64 vgpr 24 sgpr 18 agpr 0 lds 0 scratch 0 code 1234".
std::string formatResources(const TargetInfo& target, const std::vector<KernelResources>& resources);

}  // namespace epjit::compiler
