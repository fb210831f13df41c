// The command line: parses arguments into library calls and exit codes.
#pragma once

#include <string>
#include <vector>

namespace mha::cli {

// Runs the tool as `mha ARGS...` and returns its exit code: 0 success, 2 bad
// usage, config or input, 1 anything else (docs/failures.md).
int main(const std::vector<std::string>& args);

}  // namespace mha::cli
