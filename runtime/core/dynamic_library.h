// dlopen'd libraries with IREE-style symbol tables: every symbol a driver
// needs is resolved at load, and a missing library or symbol is one clear
// epjit::Error naming what was looked for.
#pragma once

#include <string>
#include <vector>

namespace epjit {

class DynamicLibrary {
 public:
  // Opens the first of `candidates` that loads; throws epjit::Error listing
  // every candidate and dlerror() of the last one, with `fix` as the remedy.
  static DynamicLibrary open_first(const std::vector<std::string>& candidates, const std::string& what,
                                   const std::string& fix);
  DynamicLibrary() = default;
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  ~DynamicLibrary();

  // The symbol's address, or nullptr.
  void* find(const char* symbol) const;
  // The symbol's address; throws epjit::Error naming the library and symbol.
  void* require(const char* symbol) const;
  template <typename Fn>
  void bind(Fn*& slot, const char* symbol) const {
    slot = reinterpret_cast<Fn*>(require(symbol));
  }
  const std::string& path() const { return path_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace epjit
