#include "mha/base/error.hpp"

namespace mha {

void fail_input(const std::string& message) {
  throw Error(ErrorKind::invalid_input, message);
}
void fail_runtime(const std::string& message) {
  throw Error(ErrorKind::runtime, message);
}

}  // namespace mha
