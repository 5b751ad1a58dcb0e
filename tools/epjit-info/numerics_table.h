#pragma once

#include <ostream>

namespace epjit::info {

// The formats of docs/NUMERICS.md with their facts computed by numerics.h
// (bias, largest finite value, NaN/Inf/-0 codes), then a few encodings.
void print_numerics_table(std::ostream& out);

}  // namespace epjit::info
