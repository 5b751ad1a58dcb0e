// Portable bundles of cache entries (epjit-warm --export / --import):
//   "EPJIT-BUNDLE 1\n", then per entry
//   "entry <key> <manifest bytes> <artifact bytes> <source bytes>\n" and those bytes,
//   then "end <count>\n".
#pragma once

#include <string>

#include "disk_tier.h"

namespace epjit::cache {

size_t export_entries(const DiskTier& tier, const std::string& path);
KernelCache::ImportResult import_entries(const DiskTier& tier, const std::string& path);

}  // namespace epjit::cache
