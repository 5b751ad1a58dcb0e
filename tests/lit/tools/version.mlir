// epjit-opt names itself and the LLVM it was built with.
// RUN: epjit-opt --version | FileCheck %s
// CHECK-DAG: LLVM version 22.1
// CHECK-DAG: epjit {{[0-9]+\.[0-9]+\.[0-9]+}}
