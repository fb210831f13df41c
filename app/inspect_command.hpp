// `mha inspect FILE...`: the header, value statistics and, for attention maps,
// per-head attention statistics of .npy files and .npz members
// (lib/include/mha/inspect.hpp), as a text report or JSON.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mha::cli {

struct InspectArgs {
  std::vector<std::string> files;
  bool json = false;
  bool attention = false, no_attention = false;
  std::optional<long> heads_axis;
};

void add_inspect_command(CLI::App& app, InspectArgs& args);

// Exit codes: 0 every file inspected, 2 a missing or malformed file or options
// that do not fit it (one stderr line naming the file), 1 anything else.
int do_inspect(const InspectArgs& args);

}  // namespace mha::cli
