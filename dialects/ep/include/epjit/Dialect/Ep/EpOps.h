#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "epjit/Dialect/Ep/EpDialect.h"

#define GET_OP_CLASSES
#include "epjit/Dialect/Ep/EpOps.h.inc"
