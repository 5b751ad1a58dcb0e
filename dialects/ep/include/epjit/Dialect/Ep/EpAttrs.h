#pragma once

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "epjit/Dialect/Ep/EpEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "epjit/Dialect/Ep/EpAttrs.h.inc"
