#pragma once

#include "mlir/IR/Dialect.h"

#include "epjit/Dialect/Ep/EpOpsDialect.h.inc"
