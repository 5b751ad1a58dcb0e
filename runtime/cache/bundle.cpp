#include "bundle.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../core/sha256.h"
#include "epjit/error.h"

namespace epjit::cache {
namespace {

constexpr const char* kMagic = "EPJIT-BUNDLE 1";

std::string read_exact(std::istream& in, size_t size) {
  std::string bytes(size, '\0');
  in.read(bytes.data(), std::streamsize(size));
  if (size_t(in.gcount()) != size) throw std::runtime_error("truncated");
  return bytes;
}

}  // namespace

size_t export_entries(const DiskTier& tier, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write the bundle " + path, "a writable path", "choose another --export path");
  out << kMagic << "\n";
  size_t count = 0;
  for (const std::string& key : tier.keys()) {
    std::string problem;
    auto entry = tier.load(key, nullptr, problem);
    if (!entry) continue;  // bad entries stay behind (epjit-cache verify reports them)
    const nlohmann::json manifest = nlohmann::json::parse(entry->manifest);
    const std::string source_key = json_string(manifest, "source_key");
    const std::string source =
        is_key(source_key) ? tier.load_source(source_key).value_or(GeneratedSource{}).source : std::string();
    out << "entry " << key << " " << entry->manifest.size() << " " << entry->binary.size() << " " << source.size()
        << "\n";
    out << entry->manifest;
    out.write(reinterpret_cast<const char*>(entry->binary.data()), std::streamsize(entry->binary.size()));
    out << source;
    ++count;
  }
  out << "end " << count << "\n";
  out.flush();
  if (!out) throw Error("writing the bundle " + path + " failed", "free space", "free space and export again");
  return count;
}

KernelCache::ImportResult import_entries(const DiskTier& tier, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read the bundle " + path, "an existing bundle file", "check the --import path");
  std::string line;
  if (!std::getline(in, line) || line != kMagic) {
    throw Error(path + " is not an epjit bundle (first line '" + line.substr(0, 40) + "')",
                std::string("a file made by epjit-warm --export, starting with '") + kMagic + "'",
                "export the bundle again with this epjit version");
  }
  KernelCache::ImportResult result;
  size_t declared = 0;
  while (std::getline(in, line)) {
    std::istringstream header(line);
    std::string word, key;
    size_t manifest_size = 0, binary_size = 0, source_size = 0;
    header >> word;
    if (word == "end") {
      header >> declared;
      break;
    }
    header >> key >> manifest_size >> binary_size >> source_size;
    if (word != "entry" || !header || !is_key(key)) {
      throw Error("the bundle " + path + " is malformed near '" + line.substr(0, 80) + "'", "an intact bundle",
                  "copy or export the bundle again");
    }
    // Sizes come from the file: bounded by what is left of it before anything is allocated.
    const auto here = in.tellg();
    in.seekg(0, std::ios::end);
    const uint64_t left = uint64_t(in.tellg() - here);
    in.seekg(here);
    if (manifest_size > (1u << 24) || binary_size > left || source_size > left ||
        uint64_t(manifest_size) + binary_size + source_size > left) {
      throw Error("the bundle " + path + " declares entry " + key + " larger than what is left of the file",
                  "an intact bundle", "copy or export the bundle again");
    }
    std::string manifest_text, binary_text, source;
    try {
      manifest_text = read_exact(in, manifest_size);
      binary_text = read_exact(in, binary_size);
      source = read_exact(in, source_size);
    } catch (const std::exception&) {
      throw Error("the bundle " + path + " is truncated in entry " + key, "an intact bundle",
                  "copy or export the bundle again");
    }
    const std::vector<uint8_t> binary(binary_text.begin(), binary_text.end());
    const nlohmann::json manifest = nlohmann::json::parse(manifest_text, nullptr, false);
    const nlohmann::json artifact =
        manifest.is_object() && manifest.contains("artifact") ? manifest["artifact"] : nlohmann::json();
    const std::string source_key = json_string(manifest, "source_key");
    std::string problem;
    if (manifest.is_discarded() || !manifest.is_object()) problem = "its manifest does not parse";
    else if (json_string(manifest, "key") != key) problem = "its manifest names another key";
    else if (binary.empty() || json_string(artifact, "sha256") != file_sha256(binary) ||
             json_unsigned(artifact, "bytes") != uint64_t(binary.size()))
      problem = "its artifact does not match the manifest's checksum";
    else if (!source.empty() && (!is_key(source_key) || json_string(manifest, "source_digest") != sha256_hex(source)))
      problem = "its source does not match the manifest's digest and key";
    else if (!manifest.contains("interface") || !manifest["interface"].is_object())
      problem = "its manifest has no interface record (exported by an older epjit)";
    else {
      try {
        ModuleInterface::parse(manifest["interface"].dump(), "bundle entry " + key);
      } catch (const Error& error) {
        problem = error.problem();
      }
    }
    if (!problem.empty()) {
      result.rejected++;
      result.problems.push_back(key + ": " + problem);
      continue;
    }
    std::string existing_problem;
    if (tier.load(key, nullptr, existing_problem)) {
      result.already_present++;
      continue;
    }
    if (!existing_problem.empty()) tier.quarantine(key);
    if (!source.empty()) tier.store_source(source_key, {source, manifest["interface"].dump(2)});
    tier.publish(key, manifest_text, binary, json_string(artifact, "sha256"), nullptr);
    result.imported++;
  }
  const size_t seen = result.imported + result.already_present + result.rejected;
  if (declared != seen) {
    throw Error("the bundle " + path + " ends after " + std::to_string(seen) + " entries but declares " +
                    std::to_string(declared),
                "an intact bundle", "copy or export the bundle again");
  }
  return result;
}

}  // namespace epjit::cache
