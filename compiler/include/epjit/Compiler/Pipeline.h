// The compiler pipeline: a template plus bindings plus a target in, the
// target's C++ (HIP, CUDA or host C++) out, each stage dumpable. This is the
// narrow interface the tools and the runtime's MLIR-backed provider use.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace epjit::compiler {

struct Template {
  std::string_view name;
  std::string_view source;
};

// The templates in templates/ (NAME.mlir, and the parts they include,
// DIR/NAME.mlir named "DIR/NAME"), embedded at build time.
llvm::ArrayRef<Template> builtinTemplates();
const Template* findTemplate(llvm::StringRef name);

enum class Stage { Template, Link, Specialize, CheckTarget, LowerNumerics, LowerWarpOps, ToEmitC, Emit };
llvm::StringRef stageName(Stage stage);
// Parses "lower-warp-ops" and friends; false when unknown.
bool parseStage(llvm::StringRef name, Stage& stage);

struct CompileOptions {
  std::string target;
  std::vector<std::string> bindings;  // KEY=VALUE
  std::vector<std::string> includeDirs;  // searched for included files before the built-in templates
  std::string dumpDir;                // write every stage there when set
  Stage stopAfter = Stage::Emit;
};

struct KernelInfo {
  std::string name;
  int64_t warpsPerBlock = 0;
};

struct CompileOutput {
  std::string mlir;       // the module after the last stage that ran
  std::string source;     // the emitted C++ when Emit ran
  std::string interface;  // the interface record (JSON, Interface.h) once check-target ran
  std::vector<KernelInfo> kernels;
};

// Runs the pipeline; on failure returns false with the diagnostics in `error`
// (one "file:line:col: error: message" per line).
bool compile(llvm::StringRef sourceText, llvm::StringRef sourceName, const CompileOptions& options,
             CompileOutput& output, std::string& error);

// One line per template parameter: "hidden : index (min 1, multiple_of 2)",
// then one per kernel, of the template linked with what it includes.
bool describeParameters(llvm::StringRef sourceText, llvm::StringRef sourceName, std::string& description,
                        std::string& error);

// File extension of emitted source for a target: ".hip", ".cu" or ".cpp".
llvm::StringRef sourceExtension(llvm::StringRef target);

}  // namespace epjit::compiler
