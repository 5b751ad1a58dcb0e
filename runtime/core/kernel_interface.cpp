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

// A count's coefficients per runtime parameter: "count_per": {NAME: N}, each
// NAME one of the record's runtime_params.
CountPer parse_count_per(const Reader& read, const json& entry, const std::string& path,
                         const ModuleInterface& record) {
  CountPer per;
  auto it = entry.find("count_per");
  if (it == entry.end()) return per;
  if (!it->is_object()) read.fail(path + ".count_per", "is not an object");
  for (const auto& [name, value] : it->items()) {
    if (!record.has_runtime_param(name))
      read.fail(path + ".count_per." + name, "names no runtime parameter of the record");
    per[name] = uint64_t(read.integer(*it, name.c_str(), path + ".count_per", 0, kMostElements));
  }
  return per;
}

BufferInfo parse_buffer(const Reader& read, const json& entry, const std::string& path,
                        const ModuleInterface& record) {
  BufferInfo buffer;
  buffer.name = read.string(entry, "name", path);
  const json& parts = read.array(entry, "parts", path);
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
    part.count_per = parse_count_per(read, parts[p], at, record);
    part.align = uint64_t(read.integer(parts[p], "align", at, 1, 4096));
    if ((part.align & (part.align - 1)) != 0 || part.align % part.element_bytes != 0)
      read.fail(at + ".align", "= " + std::to_string(part.align) +
                                   " is not a power of two and a multiple of the element size");
    if (parts[p].contains("meaning")) part.meaning = read.string(parts[p], "meaning", at);
    buffer.parts.push_back(std::move(part));
  }
  return buffer;
}

// Each part at its place after the one before it; the buffer's size.
void place_parts(BufferInfo& buffer) {
  uint64_t end = 0;
  for (BufferPartInfo& part : buffer.parts) {
    part.offset = schema::place_part(end, part.align);
    end = part.offset + part.bytes();
  }
  buffer.bytes = end;
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

  static const json kNone = json::array();  // a template without any may leave these out
  const json& runtime = record.contains("runtime_params") ? read.array(record, "runtime_params", "record") : kNone;
  for (size_t i = 0; i < runtime.size(); ++i) {
    if (!runtime[i].is_string() || runtime[i].get_ref<const std::string&>().empty())
      read.fail("record.runtime_params[" + std::to_string(i) + "]", "is not a non-empty string");
    result.runtime_params.push_back(runtime[i].get<std::string>());
  }
  if (result.runtime_params.size() > size_t(kMaxRuntimeParams))
    read.fail("record.runtime_params", "names " + std::to_string(result.runtime_params.size()) +
                                           " parameters; the window table holds " + std::to_string(kMaxRuntimeParams));

  const json& regions = read.array(record, "window_regions", "record");
  for (size_t r = 0; r < regions.size(); ++r) {
    const std::string path = "record.window_regions[" + std::to_string(r) + "]";
    WindowRegionInfo region;
    region.name = read.string(regions[r], "name", path);
    region.element = read.string(regions[r], "element", path);
    region.element_bytes = element_bytes(region.element);
    if (region.element_bytes == 0) read.fail(path + ".element", "= '" + region.element + "' is not an element type");
    region.count = uint64_t(read.integer(regions[r], "count", path, 0, kMostElements));
    region.count_per = parse_count_per(read, regions[r], path, result);
    result.window_regions.push_back(std::move(region));
  }

  const json& buffers = record.contains("buffers") ? read.array(record, "buffers", "record") : kNone;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const std::string path = "record.buffers[" + std::to_string(b) + "]";
    BufferInfo buffer = parse_buffer(read, buffers[b], path, result);
    place_parts(buffer);
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

bool ModuleInterface::has_runtime_param(std::string_view name) const {
  return std::find(runtime_params.begin(), runtime_params.end(), name) != runtime_params.end();
}

ModuleInterface ModuleInterface::bind(const std::map<std::string, uint64_t, std::less<>>& values) const {
  for (const auto& [name, value] : values)
    if (!has_runtime_param(name)) {
      std::string names;
      for (const std::string& known : runtime_params) names += (names.empty() ? "" : ", ") + known;
      throw Error("a value for '" + name + "', which is not a runtime parameter of " + template_name,
                  "values for its runtime parameters: " + (names.empty() ? std::string("(none)") : names),
                  "bind only the parameters the record names in runtime_params");
    }
  ModuleInterface result = *this;
  result.runtime_values.clear();
  for (const std::string& name : runtime_params) {
    auto it = values.find(name);
    if (it == values.end())
      throw Error(template_name + " reads runtime parameter '" + name + "', and no value was given",
                  "a value for every runtime parameter of the record", "pass " + name + " to bind()");
    if (it->second > uint64_t(kMostElements))
      throw Error(template_name + ": runtime parameter " + name + " = " + std::to_string(it->second),
                  "at most " + std::to_string(kMostElements), "use a smaller value");
    result.runtime_values.push_back(it->second);
  }
  auto complete = [&](uint64_t base, const CountPer& per, const std::string& what) {
    // Both factors are below 2^48 and there are at most kMaxRuntimeParams terms:
    // a count that passes kMostElements is refused before anything overflows.
    unsigned __int128 count = base;
    for (const auto& [name, coefficient] : per) count += (unsigned __int128)coefficient * values.find(name)->second;
    if (count > (unsigned __int128)kMostElements)
      throw Error(template_name + ": " + what + " would hold more than 2^48 elements for these runtime parameters",
                  "runtime parameters that size the window and buffers within reason", "use smaller limits");
    return uint64_t(count);
  };
  for (size_t r = 0; r < window_regions.size(); ++r)
    result.window_regions[r].count =
        complete(window_regions[r].count, window_regions[r].count_per, "window region " + window_regions[r].name);
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t p = 0; p < buffers[b].parts.size(); ++p) {
      const BufferPartInfo& part = buffers[b].parts[p];
      result.buffers[b].parts[p].count = complete(part.count, part.count_per, "buffer part " + part.name);
    }
    place_parts(result.buffers[b]);
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
