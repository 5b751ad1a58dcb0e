// The interface record the compiler emits with every module (docs/DSL.md,
// "The interface record"): the target, each kernel's name, ordered
// parameters, launch bound and when(...) condition, the symmetric window's
// regions in order with their element type and count, the buffers the host
// allocates for kernels (each part's element type, count, byte offset and
// meaning) and the template's named constants. The runtime binds kernels,
// lays out windows and buffers and reads constants from it, so nothing about
// a kernel's interface is written twice. Its format version and vocabulary
// are epjit/interface_schema.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace epjit {

// How a kernel parameter is passed.
enum class ParamKind : uint8_t {
  Pointer,  // ptr<ELEMENT>: a device pointer
  Window,   // the symmetric window table (epjit::Window, passed by value)
  Index,    // an unsigned 64-bit count (size_t in the kernel)
  I32,
  I64,
  F32,
};

struct KernelParam {
  std::string name;
  std::string type;  // as the record states it: "ptr<bf16>", "window", "index", ...
  ParamKind kind = ParamKind::Index;
  size_t value_bytes = 8;  // what one argument of this kind occupies
  // A pointer's address must be a multiple of this (the record's "align"):
  // 16 where the kernel uses 16-byte vector accesses, else the element size.
  // 0 for other kinds.
  size_t alignment = 0;
};

// What a pointer parameter needs when its record states no "align": the
// DSL's kernel argument contract (docs/DSL.md).
inline constexpr size_t kDefaultPointerAlignment = 16;

struct KernelSignature {
  std::string name;
  int warps_per_block = 1;  // the launch bound the kernel was compiled for
  // The template's when(...) that kept it in this module ("@std_moe and
  // @gpu_per_node lt @world"); empty for a kernel every module holds.
  std::string when;
  std::vector<KernelParam> params;

  // The parameter named `name`, or nullptr.
  const KernelParam* find(std::string_view name) const;
  // "ep_dispatch(input: ptr<i32>, ..., w: window)", for messages.
  std::string describe() const;
};

// A count linear in the module's runtime parameters: the record states its
// value with every runtime parameter at zero and a coefficient per
// parameter; ModuleInterface::bind completes it for the op's values.
using CountPer = std::map<std::string, uint64_t, std::less<>>;

struct WindowRegionInfo {
  std::string name;
  std::string element;  // "i8", "i32", "f32", "bf16", ...
  size_t element_bytes = 1;
  uint64_t count = 0;  // elements, for this specialization (once bound)
  CountPer count_per;  // elements per unit of each runtime parameter
  uint64_t bytes() const { return count * element_bytes; }
};

// A part of a buffer the host allocates (ep.buffer_part): its elements, and
// where it starts in its buffer.
struct BufferPartInfo {
  std::string name;
  std::string element;
  size_t element_bytes = 1;
  uint64_t count = 0;   // elements, for this specialization (once bound)
  CountPer count_per;   // elements per unit of each runtime parameter
  uint64_t align = 1;   // bytes: the part starts at a multiple of it
  uint64_t offset = 0;  // bytes from the buffer's start (schema::place_part)
  std::string meaning;  // what the part holds, as the template says
  uint64_t bytes() const { return count * element_bytes; }
  uint64_t element_offset() const { return offset / element_bytes; }
};

// One allocation: its parts in order, and its size in bytes.
struct BufferInfo {
  std::string name;
  uint64_t bytes = 0;
  std::vector<BufferPartInfo> parts;

  // Throws epjit::Error naming the parts that exist.
  const BufferPartInfo& part(std::string_view name) const;
};

struct InterfaceTarget {
  std::string name;    // "gfx1250"
  std::string vendor;  // "amd", "nvidia", "cpu"
  std::string arch;    // "gfx1250", "sm_90", "native"
  int wave_size = 0;
  // The kernels wait at entry for the kernel before them on the stream
  // (TargetInfo::dependent_launch), so a device may launch them before that
  // one ends. Absent (false) in records of compilers that did not insert it.
  bool dependent_launch = false;
};

struct ModuleInterface {
  int format = 0;
  std::string template_name;
  InterfaceTarget target;
  std::vector<KernelSignature> kernels;
  std::vector<WindowRegionInfo> window_regions;
  std::vector<BufferInfo> buffers;
  std::map<std::string, int64_t, std::less<>> constants;
  // The parameters the kernels read from the window table at run time
  // (Window::runtime_param, in this order), and their values once bound.
  std::vector<std::string> runtime_params;
  std::vector<uint64_t> runtime_values;
  std::string text;  // the record as the compiler wrote it (JSON)

  // Parses and checks a record; throws epjit::Error naming the first field
  // that is missing, of the wrong type or out of range (a record from another
  // epjit version, or a damaged one). `where` names its origin for messages.
  // A record without runtime parameters comes back bound.
  static ModuleInterface parse(std::string_view json_text, const std::string& where);

  // This record for the runtime parameters' `values` (one per name of
  // runtime_params): every count completed, every buffer part placed. Throws
  // epjit::Error naming a parameter without a value, one the record does not
  // have, or a count past what a record may hold.
  ModuleInterface bind(const std::map<std::string, uint64_t, std::less<>>& values) const;
  bool bound() const { return runtime_values.size() == runtime_params.size(); }
  bool has_runtime_param(std::string_view name) const;

  // Each throws epjit::Error naming what was asked for and what exists.
  const KernelSignature& kernel(std::string_view name) const;
  // Whether the module holds the kernel (its when(...) held); never throws.
  bool has_kernel(std::string_view name) const;
  const BufferInfo& buffer(std::string_view name) const;
  int64_t constant(std::string_view name) const;
  const WindowRegionInfo& region(std::string_view name) const;
  size_t region_index(std::string_view name) const;
};

}  // namespace epjit
