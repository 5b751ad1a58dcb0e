#pragma once

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

#define GET_TYPEDEF_CLASSES
#include "epjit/Dialect/Ep/EpOpsTypes.h.inc"
