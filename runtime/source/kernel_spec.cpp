#include "epjit/kernel_spec.h"

namespace epjit {

std::string KernelSpec::canonical() const {
  std::string text = template_name + "(";
  bool first = true;
  for (const auto& [key, value] : params) {
    text += (first ? "" : ",") + key + "=" + value;
    first = false;
  }
  return text + ")@" + target;
}

}  // namespace epjit
