// A Python rank: its device and communicator, owned together (the device
// outlives the communicator).
#pragma once

#include "epjit/comm/communicator.h"
#include "epjit/device.h"

#include <memory>
#include <string>

namespace epjit::python {

struct PyCommunicator {
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::string device_kind;
  int device_ordinal = 0;  // the GPU (DLPack device id of the arrays handed back)
};

}  // namespace epjit::python
