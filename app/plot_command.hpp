// `mha plot FILE.npy`: a PNG of the attention maps in a .npy file (one
// heatmap per head, see lib/include/mha/heatmap.hpp), written atomically
// beside it or to -o.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace mha::cli {

struct PlotArgs {
  std::string file, output;
  std::size_t batch = 0;
  std::string heads = "all";
  bool average = false;
  std::string scale = "linear", reduce = "max";
  std::string color_range = "shared";  // --color_range: shared or per_head
  std::optional<double> vmin, vmax;    // --vmin, --vmax: fixed ends of the color range
  std::string labels, key_labels;
  int cell = 0;
  std::size_t max_cells = 0;
  std::optional<std::size_t> layer;  // --layer_index: the first axis holds layers
};

void add_plot_command(CLI::App& app, PlotArgs& args);

// Exit codes: 0 the PNG was written, 2 a missing or malformed file or flags
// that do not fit it (one stderr line, nothing written), 1 anything else.
int do_plot(const PlotArgs& args);

}  // namespace mha::cli
