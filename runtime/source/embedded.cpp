#include "embedded.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "../core/sha256.h"
#include "../core/trusted_path.h"
#include "epjit/error.h"
#include "epjit/logging.h"

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

const std::string& all_templates_digest() {
  static const std::string digest = [] {
    std::vector<EmbeddedFile> files(std::begin(kTemplates), std::end(kTemplates));
    std::sort(files.begin(), files.end(), [](const EmbeddedFile& a, const EmbeddedFile& b) { return a.name < b.name; });
    Sha256 hash;
    for (const EmbeddedFile& file : files) hash.update(file.name).update("\0", 1).update(file.text).update("\0", 1);
    return hash.hex();
  }();
  return digest;
}

namespace {

namespace fs = std::filesystem;

// Whether `root` holds exactly the embedded headers (byte for byte).
bool holds_the_embedded_headers(const fs::path& root) {
  for (const EmbeddedFile& file : kHeaders) {
    std::ifstream in(root / std::string(file.name), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return false;
    if (text != file.text) return false;
  }
  return true;
}

// A private (0700) directory holding the headers, under a fresh name.
fs::path write_headers_privately(const fs::path& parent) {
  std::string pattern = (parent / "epjit-headers.XXXXXX").string();
  if (!::mkdtemp(pattern.data()))
    throw Error("cannot create a directory under " + parent.string() + " for the device headers: " +
                    std::strerror(errno),
                "a writable TMPDIR", "set TMPDIR to a directory of your own");
  const fs::path staging = pattern;
  for (const EmbeddedFile& file : kHeaders) {
    const fs::path path = staging / std::string(file.name);
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    std::ofstream(path, std::ios::binary) << file.text;
  }
  return staging;
}

}  // namespace

std::string materialized_header_dir() {
  // Once per process and TMPDIR (a child that changes TMPDIR gets its own).
  static std::mutex mutex;
  static std::map<std::string, std::string> made;
  const char* tmp = std::getenv("TMPDIR");
  const fs::path parent = tmp && *tmp ? tmp : "/tmp";
  std::lock_guard lock(mutex);
  if (auto found = made.find(parent.string()); found != made.end()) return found->second;
  std::string dir;
  [&] {
    // Per user and per content: another user's directory of the same digest
    // is never this user's, and is refused if planted under this user's name.
    const fs::path root =
        parent / ("epjit-headers-" + std::to_string(::geteuid()) + "-" + headers_digest().substr(0, 16));
    std::error_code ec;
    if (fs::exists(root, ec)) {
      const std::string why = untrusted_directory_reason(root.string(), Ownership::CurrentUser);
      if (!why.empty())
        throw Error("the device-header directory " + why, "a directory only this user can write into",
                    "remove it, or set TMPDIR to a directory of your own");
      struct stat status {};
      if (::stat(root.c_str(), &status) == 0 && (status.st_mode & 077))
        throw Error("the device-header directory " + root.string() + " is readable or searchable by others",
                    "mode 0700", "run `chmod 700 " + root.string() + "` or remove it");
      if (holds_the_embedded_headers(root)) {
        dir = root.string();
        return;
      }
      // Ours but damaged: replaced below.
      log().warn("the device headers under {} differ from this build's; rewriting them", root.string());
      fs::remove_all(root, ec);
    }
    // Written under a private name, then renamed: concurrent processes never
    // see a partial tree, and the loser of the rename uses the winner's.
    const fs::path staging = write_headers_privately(parent);
    fs::rename(staging, root, ec);
    if (ec) fs::remove_all(staging, ec);
    const std::string why = untrusted_directory_reason(root.string(), Ownership::CurrentUser);
    if (!why.empty() || !holds_the_embedded_headers(root))
      throw Error("cannot write the device headers under " + root.string() + (why.empty() ? "" : ": " + why),
                  "a writable TMPDIR of this user", "set TMPDIR to a directory of your own");
    dir = root.string();
  }();
  made[parent.string()] = dir;
  return dir;
}

}  // namespace epjit
