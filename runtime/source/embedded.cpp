#include "embedded.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>
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

namespace {

const EmbeddedFile* find_template(std::string_view name) {
  for (const EmbeddedFile& file : kTemplates)
    if (file.name == name) return &file;
  return nullptr;
}

// The names a template includes: each `ep.include "NAME"` at a line's start.
std::vector<std::string_view> includes_of(std::string_view text) {
  constexpr std::string_view kInclude = "ep.include \"";
  std::vector<std::string_view> names;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    if (line.starts_with(kInclude)) {
      line.remove_prefix(kInclude.size());
      names.push_back(line.substr(0, line.find('"')));
    }
    at = end + 1;
  }
  return names;
}

}  // namespace

std::string template_digest(std::string_view name) {
  if (!find_template(name)) return {};
  // Every file the template links, each once, in a fixed order.
  std::vector<std::string_view> closure = {name};
  for (size_t i = 0; i < closure.size(); ++i) {
    const EmbeddedFile* file = find_template(closure[i]);
    if (!file) continue;  // the compiler reports an include that names nothing
    for (std::string_view included : includes_of(file->text))
      if (std::find(closure.begin(), closure.end(), included) == closure.end()) closure.push_back(included);
  }
  std::sort(closure.begin(), closure.end());
  Sha256 hash;
  for (std::string_view part : closure) {
    const EmbeddedFile* file = find_template(part);
    hash.update(part).update("\0", 1).update(file ? file->text : std::string_view()).update("\0", 1);
  }
  return hash.hex();
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
