#include "epjit/window_layout.h"

#include <string>

#include "epjit/error.h"

namespace epjit {

WindowLayout WindowLayout::of(const ModuleInterface& record) {
  if (record.window_regions.size() > size_t(kMaxWindowRegions))
    throw Error("template " + record.template_name + " declares " + std::to_string(record.window_regions.size()) +
                    " window regions",
                "at most " + std::to_string(kMaxWindowRegions), "merge regions in the template");
  if (!record.bound())
    throw Error("a window for " + record.template_name + " before its runtime parameters are bound",
                "a record bound to the op's values (ModuleInterface::bind)", "report this as a bug");
  WindowLayout layout;
  layout.runtime_values = record.runtime_values;
  for (const WindowRegionInfo& region : record.window_regions) {
    layout.offsets.push_back(layout.total);
    layout.bytes.push_back(size_t(region.bytes()));
    layout.total += (size_t(region.bytes()) + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
  }
  return layout;
}

Window WindowLayout::table(const std::vector<void*>& peer_bases) const {
  if (peer_bases.size() > size_t(kMaxWindowPeers))
    throw Error("a window over " + std::to_string(peer_bases.size()) + " ranks",
                "at most " + std::to_string(kMaxWindowPeers) + " ranks", "use fewer ranks per op");
  Window window{};
  for (size_t r = 0; r < offsets.size(); ++r) window.region_offset[r] = offsets[r];
  for (size_t p = 0; p < peer_bases.size(); ++p) window.peer_base[p] = static_cast<char*>(peer_bases[p]);
  for (size_t i = 0; i < runtime_values.size(); ++i) window.runtime_param[i] = runtime_values[i];
  return window;
}

}  // namespace epjit
