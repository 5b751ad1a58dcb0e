// A symmetric window laid out from a module's interface record: every region
// the template declares, in declaration order, sized by the record's count
// for the specialization; and the table (epjit::Window) the kernels read.
// Nothing about the regions is written down twice.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "epjit/kernel_interface.h"
#include "epjit/targets/common/window.h"

namespace epjit {

struct WindowLayout {
  static constexpr size_t kRegionAlignment = 256;  // keeps every row start 16-byte aligned

  std::vector<size_t> offsets;  // per region, in the record's order
  std::vector<size_t> bytes;
  size_t total = 0;
  std::vector<uint64_t> runtime_values;  // the record's runtime parameters, for the table

  // Throws epjit::Error when the record declares more regions than a window
  // holds, or is not bound to its runtime parameters' values.
  static WindowLayout of(const ModuleInterface& record);

  // The table kernels address peers' regions through: region offsets, each
  // rank's base and the runtime parameters' values; throws epjit::Error beyond epjit::kMaxWindowPeers ranks.
  Window table(const std::vector<void*>& peer_bases) const;
};

}  // namespace epjit
