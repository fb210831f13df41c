#include "mha/base/error.hpp"

#include "mha/base/message.hpp"

namespace mha {

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(one_line(message)), kind_(kind) {}

void fail_input(const std::string& message) {
  throw Error(ErrorKind::invalid_input, message);
}
void fail_runtime(const std::string& message) {
  throw Error(ErrorKind::runtime, message);
}

}  // namespace mha
