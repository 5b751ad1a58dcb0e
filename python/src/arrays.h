// How arrays cross the Python boundary. In: a torch.Tensor's layout read from
// its own attributes (DLPack's export runs torch's Python-level __dlpack__:
// microseconds per argument on a small call's critical path), any other
// array through DLPack or the buffer protocol. Out: views of op memory,
// numpy on the host, DLPack-exporting arrays on GPUs.
#pragma once

#include "rank.h"

#include "epjit/ep/op.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>

namespace epjit::python {

// An argument array: what the caller passed, kept while a host stream may
// still read it, and the op's view of it.
struct ArgumentArray {
  nanobind::object source;
  std::optional<nanobind::ndarray<>> imported;  // the DLPack/buffer import, when that path read it
  ep::TensorRef ref;
};

// Checks `value` (named `argument` in errors) is a C-contiguous array on the
// rank's device of dtype `expected` (or one whose bits stand for it: uint16
// for bf16, uint8 for fp8), and returns its layout.
ArgumentArray import_argument(nanobind::handle value, const char* argument, const PyCommunicator& rank,
                              std::optional<ep::DType> expected);

// A view of op memory (None where `t` has no data), keeping `owner` alive.
nanobind::object view(const ep::TensorRef& t, const PyCommunicator& rank, nanobind::handle owner);

}  // namespace epjit::python
