// epjit-opt: the mlir-opt of epjit. Parses, verifies, transforms and prints ep
// DSL IR together with the upstream dialects the DSL reuses.
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include "epjit/Compiler/Passes.h"
#include "epjit/Dialect/Ep/EpDialect.h"
#include "epjit/build_info.h"

int main(int argc, char** argv) {
  llvm::cl::AddExtraVersionPrinter([](llvm::raw_ostream& os) {
    os << "epjit " << EPJIT_VERSION << " (" << EPJIT_GIT_REVISION << ")\n";
  });
  mlir::registerTransformsPasses();
  epjit::registerEpjitPasses();

  mlir::DialectRegistry registry;
  registry.insert<epjit::ep::EpDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::scf::SCFDialect, mlir::emitc::EmitCDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "epjit optimizer driver: the ep DSL and its passes\n", registry));
}
