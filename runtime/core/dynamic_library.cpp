#include "dynamic_library.h"

#include <dlfcn.h>

#include <utility>

#include "epjit/error.h"

namespace epjit {

DynamicLibrary DynamicLibrary::open_first(const std::vector<std::string>& candidates, const std::string& what,
                                          const std::string& fix) {
  std::string tried, last_error;
  for (const std::string& candidate : candidates) {
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      DynamicLibrary library;
      library.handle_ = handle;
      library.path_ = candidate;
      return library;
    }
    const char* message = dlerror();
    last_error = message ? message : "unknown error";
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  throw Error(what + " could not be loaded (tried " + tried + "; last error: " + last_error + ")",
              "one of those libraries on the loader path", fix);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) dlclose(handle_);
}

void* DynamicLibrary::find(const char* symbol) const { return handle_ ? dlsym(handle_, symbol) : nullptr; }

void* DynamicLibrary::require(const char* symbol) const {
  if (void* address = find(symbol)) return address;
  throw Error(path_ + " has no symbol " + symbol, "a library that exports " + std::string(symbol),
              "install a newer version of that library, or point epjit at another one");
}

}  // namespace epjit
