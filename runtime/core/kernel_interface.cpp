#include "epjit/kernel_interface.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "epjit/error.h"
#include "epjit/interface_schema.h"
#include "epjit/targets/common/window.h"

namespace epjit {
namespace {

using nlohmann::json;

using schema::element_bytes;
using schema::kInterfaceFormat;

// Bounded so that count * element_bytes, offsets and their sums cannot overflow.
constexpr int64_t kMostElements = int64_t(1) << 48;

// Reads a record field and says what is wrong with it when it is absent or
// of another type: every check throws the same kind of message.
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error("the interface record of " + where_ + " is invalid: " + field + " " + what,
                "a record of format " + std::to_string(kInterfaceFormat) + " as epjit's compiler writes it",
                "rebuild the kernel (remove the cache entry, or re-export the bundle with this epjit version)");
  }

  const json& member(const json& object, const char* key, const std::string& path) const {
    if (!object.is_object()) fail(path, "is not an object");
    auto it = object.find(key);
    if (it == object.end()) fail(path + "." + key, "is missing");
    return *it;
  }
  std::string string(const json& object, const char* key, const std::string& path) const {
    const json& value = member(object, key, path);
    if (!value.is_string() || value.get_ref<const std::string&>().empty())
      fail(path + "." + key, "is not a non-empty string");
    return value.get<std::string>();
  }
  int64_t integer(const json& object, const char* key, const std::string& path, int64_t min, int64_t max) const {
    const json& value = member(object, key, path);
    if (!value.is_number_integer()) fail(path + "." + key, "is not an integer");
    const int64_t number = value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)
                               ? INT64_MAX
                               : value.get<int64_t>();
    if (number < min || number > max)
      fail(path + "." + key, "= " + std::to_string(number) + " is outside [" + std::to_string(min) + ", " +
                                 std::to_string(max) + "]");
    return number;
  }
  // An optional integer in [min, max]: `absent` when the key is missing.
  int64_t optional_integer(const json& object, const char* key, const std::string& path, int64_t min, int64_t max,
                           int64_t absent) const {
    if (!object.is_object()) fail(path, "is not an object");
    return object.contains(key) ? integer(object, key, path, min, max) : absent;
  }
  // An optional boolean: `absent` when the key is missing.
  bool optional_boolean(const json& object, const char* key, const std::string& path, bool absent) const {
    if (!object.is_object()) fail(path, "is not an object");
    auto it = object.find(key);
    if (it == object.end()) return absent;
    if (!it->is_boolean()) fail(path + "." + key, "is not true or false");
    return it->get<bool>();
  }
  const json& array(const json& object, const char* key, const std::string& path) const {
    const json& value = member(object, key, path);
    if (!value.is_array()) fail(path + "." + key, "is not an array");
    return value;
  }

 private:
  std::string where_;
};

KernelParam parse_param(const Reader& read, const json& entry, const std::string& path) {
  KernelParam param;
  param.name = read.string(entry, "name", path);
  param.type = read.string(entry, "type", path);
  const std::string& type = param.type;
  const size_t prefix = schema::kPointerPrefix.size();
  if (type.starts_with(schema::kPointerPrefix) && type.ends_with(">")) {
    const size_t element = element_bytes(std::string_view(type).substr(prefix, type.size() - prefix - 1));
    if (element == 0) read.fail(path + ".type", "= '" + type + "' points to an unknown element type");
    param.kind = ParamKind::Pointer;
    // A record from a compile that stopped before the warp ops were lowered
    // has no "align": the DSL's contract (every pointer argument 16-byte
    // aligned) stands.
    param.alignment = size_t(read.optional_integer(entry, "align", path, int64_t(element), 4096,
                                                   int64_t(kDefaultPointerAlignment)));
    if ((param.alignment & (param.alignment - 1)) != 0)
      read.fail(path + ".align", "= " + std::to_string(param.alignment) + " is not a power of two");
  } else if (type == schema::kWindowType) {
    param.kind = ParamKind::Window;
    param.value_bytes = sizeof(Window);  // passed by value
  } else if (type == schema::kIndexType) {
    param.kind = ParamKind::Index;
  } else if (type == "i32") {
    param.kind = ParamKind::I32;
    param.value_bytes = 4;
  } else if (type == "i64") {
    param.kind = ParamKind::I64;
  } else if (type == "f32") {
    param.kind = ParamKind::F32;
    param.value_bytes = 4;
  } else {
    read.fail(path + ".type", "= '" + type + "' is not ptr<T>, window, index, i32, i64 or f32");
  }
  return param;
}

// A buffer's parts lie in order inside it, each at a multiple of its element size.
BufferInfo parse_buffer(const Reader& read, const json& entry, const std::string& path) {
  BufferInfo buffer;
  buffer.name = read.string(entry, "name", path);
  buffer.bytes = uint64_t(read.integer(entry, "bytes", path, 0, kMostElements * 8));
  const json& parts = read.array(entry, "parts", path);
  uint64_t end = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::string at = path + ".parts[" + std::to_string(p) + "]";
    BufferPartInfo part;
    part.name = read.string(parts[p], "name", at);
    for (const BufferPartInfo& earlier : buffer.parts)
      if (earlier.name == part.name) read.fail(at, "repeats part '" + part.name + "'");
    part.element = read.string(parts[p], "element", at);
    part.element_bytes = element_bytes(part.element);
    if (part.element_bytes == 0) read.fail(at + ".element", "= '" + part.element + "' is not an element type");
    part.count = uint64_t(read.integer(parts[p], "count", at, 0, kMostElements));
    part.offset = uint64_t(read.integer(parts[p], "offset", at, 0, kMostElements * 8));
    if (part.offset < end || part.offset % part.element_bytes != 0 || part.offset + part.bytes() > buffer.bytes)
      read.fail(at + ".offset", "= " + std::to_string(part.offset) + " does not place " +
                                    std::to_string(part.bytes()) + " bytes after the part before it (ending at " +
                                    std::to_string(end) + "), on a multiple of its element size, inside the " +
                                    std::to_string(buffer.bytes) + " bytes of buffer '" + buffer.name + "'");
    if (parts[p].contains("meaning")) part.meaning = read.string(parts[p], "meaning", at);
    end = part.offset + part.bytes();
    buffer.parts.push_back(std::move(part));
  }
  return buffer;
}

// The entry of `entries` named `name`, or null with every name in `names`
// (", "-separated), for a message that says what exists.
template <class Entry>
const Entry* find_named(const std::vector<Entry>& entries, std::string_view name, std::string& names) {
  for (const Entry& entry : entries) {
    if (entry.name == name) return &entry;
    names += (names.empty() ? "" : ", ") + entry.name;
  }
  if (names.empty()) names = "(none)";
  return nullptr;
}

}  // namespace

const BufferPartInfo& BufferInfo::part(std::string_view wanted) const {
  std::string names;
  if (const BufferPartInfo* found = find_named(parts, wanted, names)) return *found;
  throw Error("buffer '" + name + "' has no part '" + std::string(wanted) + "'", "one of its parts: " + names,
              "use a part the template declares with ep.buffer_part in \"" + name + "\"");
}

const KernelParam* KernelSignature::find(std::string_view param) const {
  for (const KernelParam& entry : params)
    if (entry.name == param) return &entry;
  return nullptr;
}

std::string KernelSignature::describe() const {
  std::string text = name + "(";
  for (size_t i = 0; i < params.size(); ++i) text += (i ? ", " : "") + params[i].name + ": " + params[i].type;
  return text + ")";
}

ModuleInterface ModuleInterface::parse(std::string_view json_text, const std::string& where) {
  const Reader read(where);
  const json record = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) read.fail("the text", "is not JSON");
  ModuleInterface result;
  result.text = std::string(json_text);
  result.format = int(read.integer(record, "format", "record", 0, INT32_MAX));
  if (result.format != kInterfaceFormat)
    read.fail("record.format", "= " + std::to_string(result.format) + " is not this epjit's format " +
                                   std::to_string(kInterfaceFormat));
  result.template_name = read.string(record, "template", "record");

  const json& target = read.member(record, "target", "record");
  result.target.name = read.string(target, "name", "record.target");
  result.target.vendor = read.string(target, "vendor", "record.target");
  result.target.arch = read.string(target, "arch", "record.target");
  result.target.wave_size = int(read.integer(target, "wave_size", "record.target", 1, 1024));
  result.target.dependent_launch = read.optional_boolean(target, "dependent_launch", "record.target", false);

  const json& kernels = read.array(record, "kernels", "record");
  for (size_t k = 0; k < kernels.size(); ++k) {
    const std::string path = "record.kernels[" + std::to_string(k) + "]";
    KernelSignature kernel;
    kernel.name = read.string(kernels[k], "name", path);
    kernel.warps_per_block = int(read.integer(kernels[k], "warps_per_block", path, 1, 1024));
    if (auto when = kernels[k].find("when"); when != kernels[k].end()) {  // absent: every module holds it
      if (!when->is_string()) read.fail(path + ".when", "is not a string");
      kernel.when = when->get<std::string>();
    }
    const json& params = read.array(kernels[k], "params", path);
    for (size_t p = 0; p < params.size(); ++p) {
      KernelParam param = parse_param(read, params[p], path + ".params[" + std::to_string(p) + "]");
      if (kernel.find(param.name)) read.fail(path, "names parameter '" + param.name + "' twice");
      kernel.params.push_back(std::move(param));
    }
    for (const KernelSignature& earlier : result.kernels)
      if (earlier.name == kernel.name) read.fail(path, "repeats kernel '" + kernel.name + "'");
    result.kernels.push_back(std::move(kernel));
  }

  const json& regions = read.array(record, "window_regions", "record");
  for (size_t r = 0; r < regions.size(); ++r) {
    const std::string path = "record.window_regions[" + std::to_string(r) + "]";
    WindowRegionInfo region;
    region.name = read.string(regions[r], "name", path);
    region.element = read.string(regions[r], "element", path);
    region.element_bytes = element_bytes(region.element);
    if (region.element_bytes == 0) read.fail(path + ".element", "= '" + region.element + "' is not an element type");
    region.count = uint64_t(read.integer(regions[r], "count", path, 0, kMostElements));
    result.window_regions.push_back(std::move(region));
  }

  static const json kNoBuffers = json::array();  // a template that declares none may leave them out
  const json& buffers = record.contains("buffers") ? read.array(record, "buffers", "record") : kNoBuffers;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const std::string path = "record.buffers[" + std::to_string(b) + "]";
    BufferInfo buffer = parse_buffer(read, buffers[b], path);
    for (const BufferInfo& earlier : result.buffers) {
      if (earlier.name == buffer.name) read.fail(path, "repeats buffer '" + buffer.name + "'");
      for (const BufferPartInfo& part : buffer.parts)
        for (const BufferPartInfo& other : earlier.parts)
          if (other.name == part.name) read.fail(path, "repeats part '" + part.name + "' of buffer '" + earlier.name + "'");
    }
    result.buffers.push_back(std::move(buffer));
  }

  const json& constants = read.member(record, "constants", "record");
  if (!constants.is_object()) read.fail("record.constants", "is not an object");
  for (const auto& [name, value] : constants.items()) {
    if (!value.is_number_integer()) read.fail("record.constants." + name, "is not an integer");
    result.constants[name] = value.get<int64_t>();
  }
  return result;
}

const KernelSignature& ModuleInterface::kernel(std::string_view name) const {
  std::string names;
  if (const KernelSignature* found = find_named(kernels, name, names)) return *found;
  throw Error("template " + template_name + " has no kernel '" + std::string(name) + "'",
              "one of its kernels: " + names,
              "bind a kernel the template defines (epjit-compile --emit interface lists them)");
}

bool ModuleInterface::has_kernel(std::string_view name) const {
  return std::any_of(kernels.begin(), kernels.end(), [&](const KernelSignature& kernel) { return kernel.name == name; });
}

const BufferInfo& ModuleInterface::buffer(std::string_view name) const {
  std::string names;
  if (const BufferInfo* found = find_named(buffers, name, names)) return *found;
  throw Error("template " + template_name + " has no buffer '" + std::string(name) + "'",
              "one of its buffers: " + names,
              "declare its parts in the template with ep.buffer_part, or use a buffer it declares");
}

int64_t ModuleInterface::constant(std::string_view name) const {
  if (auto it = constants.find(name); it != constants.end()) return it->second;
  std::string names;
  for (const auto& [known, value] : constants) names += (names.empty() ? "" : ", ") + known;
  throw Error("template " + template_name + " declares no constant '" + std::string(name) + "'",
              "one of its ep.constant names: " + (names.empty() ? std::string("(none)") : names),
              "declare it in the template with ep.constant, or read one it declares");
}

size_t ModuleInterface::region_index(std::string_view name) const {
  std::string names;
  if (const WindowRegionInfo* found = find_named(window_regions, name, names))
    return size_t(found - window_regions.data());
  throw Error("template " + template_name + " has no window region '" + std::string(name) + "'",
              "one of its regions: " + names,
              "use a region the template declares with ep.window_region");
}

const WindowRegionInfo& ModuleInterface::region(std::string_view name) const {
  return window_regions[region_index(name)];
}

}  // namespace epjit
