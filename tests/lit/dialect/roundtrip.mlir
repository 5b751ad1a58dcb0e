// The ep dialect parses, verifies and prints back what it parsed, in its
// custom form and from the generic form.
// RUN: epjit-opt %s | epjit-opt | FileCheck %s
// RUN: epjit-opt %s --mlir-print-op-generic | epjit-opt | FileCheck %s

// CHECK-LABEL: func.func @warp_index
// CHECK-NEXT: %[[WARP:.*]] = ep.warp_index : index
// CHECK-NEXT: return %[[WARP]] : index
func.func @warp_index() -> index {
  %warp = ep.warp_index : index
  return %warp : index
}
