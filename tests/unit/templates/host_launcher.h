// Runs a host-target kernel the way the host device will: one CPU thread per
// warp, blocks of warps sharing a barrier, each thread entering the kernel
// through NAME__epjit_host_entry(args, warp_context). Test-only until the
// runtime's host device exists.
#pragma once

#include <dlfcn.h>

#include <barrier>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "epjit/targets/host/prelude.h"

namespace epjit::testing {

using HostEntry = void (*)(void** args, const host::WarpContext* warp);

class HostKernelLibrary {
 public:
  explicit HostKernelLibrary(const std::string& path) : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    if (!handle_) throw std::runtime_error("dlopen " + path + ": " + dlerror());
  }
  ~HostKernelLibrary() {
    if (handle_) dlclose(handle_);
  }
  HostKernelLibrary(const HostKernelLibrary&) = delete;
  HostKernelLibrary& operator=(const HostKernelLibrary&) = delete;

  HostEntry entry(const std::string& kernel) const {
    const std::string symbol = kernel + "__epjit_host_entry";
    auto* fn = reinterpret_cast<HostEntry>(dlsym(handle_, symbol.c_str()));
    if (!fn) throw std::runtime_error("no symbol " + symbol + " in the kernel library");
    return fn;
  }

 private:
  void* handle_;
};

inline void launch(HostEntry entry, uint32_t blocks, uint32_t warps_per_block, std::vector<void*> args) {
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<std::barrier<>>> barriers;
  for (uint32_t b = 0; b < blocks; ++b) barriers.push_back(std::make_unique<std::barrier<>>(warps_per_block));
  for (uint32_t b = 0; b < blocks; ++b) {
    for (uint32_t w = 0; w < warps_per_block; ++w) {
      threads.emplace_back([&, b, w] {
        const host::WarpContext context{b, blocks, w, warps_per_block, barriers[b].get(),
                                        [](void* barrier) { static_cast<std::barrier<>*>(barrier)->arrive_and_wait(); }};
        entry(args.data(), &context);
      });
    }
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace epjit::testing
