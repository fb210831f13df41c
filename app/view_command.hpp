// `mha view PATH`: the attention viewer page of a run directory or attention
// .npy file, or the report of a sweep directory (docs/attention-maps.md,
// docs/sweeps.md). `mha run --html` and `mha sweep --report` write the same
// pages through the functions below.
#pragma once

#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace mha::cli {

struct ViewArgs {
  std::string path, output, png, labels, key_labels;
  std::optional<std::size_t> batch_index;
  std::string y, x, group, mean;  // sweep charts
};

void add_view_command(CLI::App& app, ViewArgs& args);

// Exit codes: 0 the page was written, 2 a missing or malformed input or an
// option that does not fit it (one stderr line naming the file), 1 anything
// else (an output that cannot be written).
int do_view(const ViewArgs& args);

// The viewer page of `path` (run directory or .npy) to `html`; logs it.
void write_attention_view(const ViewArgs& args, const std::string& html);

// The report of the sweep in `dir`: report.html and, unless `png` is empty, a
// PNG of the chosen chart. Logs both.
void write_sweep_report(const std::string& dir, const ViewArgs& args, const std::string& html,
                        const std::string& png);

}  // namespace mha::cli
