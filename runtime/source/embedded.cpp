#include "embedded.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "../core/sha256.h"
#include "epjit/error.h"

namespace epjit {
namespace {

constexpr EmbeddedFile kHeaders[] = {
#include "epjit/embedded_headers.inc"
};

constexpr EmbeddedFile kTemplates[] = {
#include "epjit/templates.inc"
};

}  // namespace

std::span<const EmbeddedFile> embedded_headers() { return kHeaders; }
std::span<const EmbeddedFile> embedded_templates() { return kTemplates; }

const std::string& headers_digest() {
  static const std::string digest = [] {
    Sha256 hash;
    for (const EmbeddedFile& file : kHeaders) hash.update(file.name).update("\0", 1).update(file.text).update("\0", 1);
    return hash.hex();
  }();
  return digest;
}

std::string template_digest(std::string_view name) {
  for (const EmbeddedFile& file : kTemplates)
    if (file.name == name) return sha256_hex(file.text);
  return {};
}

const std::string& materialized_header_dir() {
  static std::once_flag once;
  static std::string dir;
  std::call_once(once, [] {
    namespace fs = std::filesystem;
    const char* tmp = std::getenv("TMPDIR");
    const fs::path root = fs::path(tmp && *tmp ? tmp : "/tmp") / ("epjit-headers-" + headers_digest().substr(0, 16));
    if (!fs::exists(root / "complete")) {
      // Written under a private name, then renamed: concurrent processes never see a partial tree.
      const fs::path staging = root.string() + ".staging." + std::to_string(getpid());
      std::error_code ec;
      fs::remove_all(staging, ec);
      for (const EmbeddedFile& file : kHeaders) {
        const fs::path path = staging / std::string(file.name);
        fs::create_directories(path.parent_path(), ec);
        std::ofstream(path, std::ios::binary) << file.text;
      }
      std::ofstream(staging / "complete") << headers_digest();
      fs::rename(staging, root, ec);
      if (ec) fs::remove_all(staging, ec);  // another process won the rename
      if (!fs::exists(root / "complete")) {
        throw Error("cannot write the device headers under " + root.string(), "a writable TMPDIR",
                    "set TMPDIR to a writable directory");
      }
    }
    dir = root.string();
  });
  return dir;
}

}  // namespace epjit
