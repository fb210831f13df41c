// One error type for the whole library. Its message is a single line that
// names the file, key or tensor at fault and what was expected; the
// application prints it and maps the kind to an exit code. Whatever a message
// was built from, what() is one line of valid UTF-8 of at most
// kMessageChars characters (mha/base/message.hpp: one_line), so that no file
// can forge a second line or flood the terminal through it.
#pragma once

#include <stdexcept>
#include <string>

namespace mha {

enum class ErrorKind {
  invalid_input,  // bad usage, config, input file or shape: exit code 2
  runtime,        // anything else, e.g. an output that cannot be written: exit code 1
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }
  // Exit code documented in docs/failures.md: 2 for invalid input, 1 otherwise.
  int exit_code() const noexcept { return kind_ == ErrorKind::invalid_input ? 2 : 1; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void fail_input(const std::string& message);
[[noreturn]] void fail_runtime(const std::string& message);

// "(2, 3, 4)": NumPy's spelling of a shape, used in every shape message.
template <class Shape>
std::string shape_str(const Shape& shape) {
  std::string s = "(";
  std::size_t n = 0;
  for (auto d : shape) {
    if (n++) s += ", ";
    s += std::to_string(d);
  }
  if (n == 1) s += ",";
  return s + ")";
}

}  // namespace mha
