// epjit-info: what this build of epjit is and what its numerics are.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "epjit/version.h"
#include "numerics_table.h"

namespace {

std::string compiler_half() {
#ifdef EPJIT_COMPILER_MLIR_VERSION
  return std::string("built against MLIR ") + EPJIT_COMPILER_MLIR_VERSION + " (epjit-opt)";
#else
  return "not built (MLIR 22.1 was not found at configure time)";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epjit-info: this build of epjit and its numerics"};
  bool numerics_only = false;
  app.add_flag("--numerics-only", numerics_only, "print only the numerics table");
  app.set_version_flag("--version", std::string("epjit ") + std::string(epjit::version()));
  CLI11_PARSE(app, argc, argv);

  if (!numerics_only) {
    std::cout << "epjit " << epjit::version() << " (" << epjit::git_revision() << ")\n"
              << "compiler half: " << compiler_half() << "\n\n";
  }
  epjit::info::print_numerics_table(std::cout);
  return 0;
}
