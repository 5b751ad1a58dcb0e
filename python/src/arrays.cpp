#include "arrays.h"

#include "epjit/error.h"

#include <Python.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace epjit::python {
namespace {

using ep::DType;
using ep::TensorRef;

// What the checks need of an argument, however it was read.
struct Layout {
  void* data = nullptr;
  nb::dlpack::dtype dtype;
  int device_type = nb::device::cpu::value;
  int device_id = 0;
  std::vector<int64_t> shape;
};

// The DLPack device type of a device's memory: CPU, CUDA or ROCm.
int dlpack_device_type(const Device& device) {
  switch (device.vendor()) {
    case Vendor::Cpu: return nb::device::cpu::value;
    case Vendor::Nvidia: return nb::device::cuda::value;
    case Vendor::Amd: return nb::device::rocm::value;
  }
  return nb::device::cpu::value;
}

// The element type of an argument, for the op's dtype checks.
DType dtype_of(nb::dlpack::dtype t, const char* argument, std::optional<DType> expected) {
  const auto code = nb::dlpack::dtype_code(t.code);
  if (code == nb::dlpack::dtype_code::Float && t.bits == 32) return DType::F32;
  if (code == nb::dlpack::dtype_code::Int && t.bits == 32) return DType::I32;
  if (code == nb::dlpack::dtype_code::Int && t.bits == 64) return DType::I64;
  if (code == nb::dlpack::dtype_code::Bfloat && t.bits == 16) return DType::BF16;
  if (code == nb::dlpack::dtype_code::Float8_E4M3FN) return DType::FP8_E4M3FN;
  if (code == nb::dlpack::dtype_code::Float8_E4M3FNUZ) return DType::FP8_E4M3FNUZ;
  if (code == nb::dlpack::dtype_code::Float4_E2M1FN) return DType::FP4_E2M1;
  // Raw bit containers stand for the types numpy lacks: uint16 for bf16, uint8
  // for fp8 (or scales). Never for f32, i32 or i64: a uint32 array holds numbers,
  // and reading them as float or signed bits would be a silent reinterpretation.
  const bool numpy_lacks =
      expected && *expected != DType::F32 && *expected != DType::I32 && *expected != DType::I64;
  if (code == nb::dlpack::dtype_code::UInt && numpy_lacks && ep::bits_of(*expected) == t.bits) return *expected;
  if ((code == nb::dlpack::dtype_code::UInt || code == nb::dlpack::dtype_code::Int) && t.bits == 8) return DType::U8;
  if (code == nb::dlpack::dtype_code::Bool && t.bits == 8) return DType::U8;  // one byte, 0 or 1
  throw Error(std::string(argument) + " has a DLPack dtype (code " + std::to_string(t.code) + ", " +
                  std::to_string(t.bits) + " bits) the op does not take",
              expected ? ep::name_of(*expected) : "a supported dtype", "convert " + std::string(argument) + " first");
}

void check_device(const Layout& layout, const char* argument, const PyCommunicator& rank) {
  const bool host = rank.device->vendor() == Vendor::Cpu;
  const bool ok = layout.device_type == dlpack_device_type(*rank.device) &&
                  (host || layout.device_id == rank.device_ordinal);
  if (!ok)
    throw Error(std::string(argument) + " lives on DLPack device type " + std::to_string(layout.device_type) +
                    ", device " + std::to_string(layout.device_id),
                host ? "a CPU tensor (the op runs on the host device)"
                     : "a tensor on this rank's GPU (" + rank.device_kind + ":" + std::to_string(rank.device_ordinal) +
                           ")",
                "move " + std::string(argument) + " to the op's device");
}

// torch's tensor types and dtypes, looked up once torch is imported (epjit
// never imports it). Only what the fast path reads: a dtype missing here, a
// tensor subclass (FakeTensor, DTensor: their data_ptr() means something else)
// or a strided view goes through DLPack, which gives the same errors as before.
struct Torch {
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  int gpu_device_type = nb::device::cuda::value;  // ROCm builds of torch call their GPUs "cuda"
  std::vector<std::pair<nb::object, nb::dlpack::dtype>> dtypes;
};

// Never destroyed: its references must not be dropped after the interpreter is gone.
const Torch* torch_if_imported() {
  static const Torch* torch = nullptr;
  if (torch) return torch;
  PyObject* module = PyImport_GetModule(nb::str("torch").ptr());  // new reference or null, no import
  if (!module) {
    PyErr_Clear();
    return nullptr;
  }
  nb::object torch_module = nb::steal(module);
  if (!nb::hasattr(torch_module, "Tensor") || !nb::hasattr(torch_module, "nn")) return nullptr;  // mid-import
  Torch found;
  found.tensor = reinterpret_cast<PyTypeObject*>(torch_module.attr("Tensor").ptr());
  found.parameter = reinterpret_cast<PyTypeObject*>(torch_module.attr("nn").attr("Parameter").ptr());
  found.gpu_device_type =
      torch_module.attr("version").attr("hip").is_none() ? nb::device::cuda::value : nb::device::rocm::value;
  const auto add = [&](const char* name, nb::dlpack::dtype_code code, uint8_t bits) {
    if (nb::hasattr(torch_module, name))
      found.dtypes.emplace_back(torch_module.attr(name), nb::dlpack::dtype{uint8_t(code), bits, 1});
  };
  add("bfloat16", nb::dlpack::dtype_code::Bfloat, 16);
  add("float32", nb::dlpack::dtype_code::Float, 32);
  add("int32", nb::dlpack::dtype_code::Int, 32);
  add("int64", nb::dlpack::dtype_code::Int, 64);  // frameworks' top-k ids
  add("bool", nb::dlpack::dtype_code::Bool, 8);   // DeepEP's is_token_in_rank
  add("uint8", nb::dlpack::dtype_code::UInt, 8);
  add("int8", nb::dlpack::dtype_code::Int, 8);
  add("uint16", nb::dlpack::dtype_code::UInt, 16);
  add("float8_e4m3fn", nb::dlpack::dtype_code::Float8_E4M3FN, 8);
  add("float8_e4m3fnuz", nb::dlpack::dtype_code::Float8_E4M3FNUZ, 8);
  torch = new Torch(std::move(found));
  return torch;
}

// A plain torch.Tensor (or Parameter) of a listed dtype on the CPU or a GPU,
// C-contiguous: its layout from its attributes; anything else: nothing.
std::optional<Layout> torch_layout(nb::handle value) {
  const Torch* torch = torch_if_imported();
  if (!torch) return std::nullopt;
  PyTypeObject* type = Py_TYPE(value.ptr());
  if (type != torch->tensor && type != torch->parameter) return std::nullopt;
  Layout layout;
  const nb::object dtype = value.attr("dtype");
  const auto known = std::find_if(torch->dtypes.begin(), torch->dtypes.end(),
                                  [&](const auto& entry) { return entry.first.is(dtype); });
  if (known == torch->dtypes.end()) return std::nullopt;
  layout.dtype = known->second;
  if (nb::cast<bool>(value.attr("is_cuda"))) {
    layout.device_type = torch->gpu_device_type;
    layout.device_id = nb::cast<int>(value.attr("get_device")());
  } else if (!nb::cast<bool>(value.attr("is_cpu"))) {
    return std::nullopt;  // meta, mps, ...: DLPack says where it lives
  }
  if (!nb::cast<bool>(value.attr("is_contiguous")())) return std::nullopt;  // DLPack's path names the stride
  const nb::tuple shape = nb::borrow<nb::tuple>(value.attr("shape"));  // torch.Size is a tuple
  layout.shape.reserve(shape.size());
  for (nb::handle extent : shape) layout.shape.push_back(nb::cast<int64_t>(extent));
  layout.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(value.attr("data_ptr")()));
  return layout;
}

Layout dlpack_layout(const nb::ndarray<>& array, const char* argument) {
  Layout layout;
  layout.data = array.data();
  layout.dtype = array.dtype();
  layout.device_type = array.device_type();
  layout.device_id = array.device_id();
  int64_t stride = 1;
  const bool empty = array.size() == 0;  // an empty tensor is contiguous whatever its strides
  for (size_t d = array.ndim(); !empty && d-- > 0;) {
    if (array.shape(d) > 1 && array.stride(d) != stride)
      throw Error(std::string(argument) + " is not contiguous (stride " + std::to_string(array.stride(d)) +
                      " in dimension " + std::to_string(d) + ")",
                  "a C-contiguous tensor", "pass " + std::string(argument) + ".contiguous() / np.ascontiguousarray");
    stride *= int64_t(array.shape(d));
  }
  for (size_t d = 0; d < array.ndim(); ++d) layout.shape.push_back(int64_t(array.shape(d)));
  return layout;
}

}  // namespace

ArgumentArray import_argument(nb::handle value, const char* argument, const PyCommunicator& rank,
                              std::optional<DType> expected) {
  ArgumentArray result{nb::borrow(value), std::nullopt, {}};
  std::optional<Layout> layout = torch_layout(value);
  if (!layout) {
    nb::ndarray<> array;
    if (value.is_none() || !nb::try_cast(value, array))
      throw Error(std::string(argument) + " is a " + nb::type_name(value.type()).c_str() + ", not an array",
                  "an array that exports DLPack or the buffer protocol (torch, numpy, cupy, ...)",
                  "pass " + std::string(argument) + " as such an array");
    layout = dlpack_layout(array, argument);
    result.imported = std::move(array);
  }
  check_device(*layout, argument, rank);
  result.ref.dtype = dtype_of(layout->dtype, argument, expected);
  result.ref.shape = std::move(layout->shape);
  result.ref.data = layout->data;
  return result;
}

nb::object view(const TensorRef& t, const PyCommunicator& rank, nb::handle owner) {
  if (!t.data) return nb::none();
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  nb::dlpack::dtype dtype;
  switch (t.dtype) {
    case DType::BF16: dtype = nb::dtype<uint16_t>(); break;  // bits; __init__.py views them as bfloat16
    case DType::F32: dtype = nb::dtype<float>(); break;
    case DType::I32: dtype = nb::dtype<int32_t>(); break;
    case DType::I64: dtype = nb::dtype<int64_t>(); break;
    case DType::FP4_E2M1:
      dtype = nb::dtype<uint8_t>();
      if (!shape.empty()) shape.back() /= 2;
      break;
    default: dtype = nb::dtype<uint8_t>(); break;
  }
  const int device_type = dlpack_device_type(*rank.device);
  if (rank.device->host_addressable())
    return nb::cast(nb::ndarray<nb::numpy>(t.data, shape.size(), shape.data(), owner, nullptr, dtype, device_type, 0));
  // GPUs: a DLPack-exporting array; epjit/__init__.py hands it to torch.
  return nb::cast(
      nb::ndarray<>(t.data, shape.size(), shape.data(), owner, nullptr, dtype, device_type, rank.device_ordinal));
}

}  // namespace epjit::python
