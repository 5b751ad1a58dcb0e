// The device-independent half of Event: only timing events have times.
#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit {

float Event::elapsed_ms(const Event& start) const {
  if (use_ != EventUse::timing || start.use_ != EventUse::timing)
    throw Error("elapsed time asked of an event created for completion only",
                "two events created with EventUse::timing",
                "create both with device.create_event(EventUse::timing)");
  return measured_ms(start);
}

}  // namespace epjit
