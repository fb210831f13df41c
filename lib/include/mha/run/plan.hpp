// The plan of a run: everything `mha run` decides from a config and the
// headers of its files before it reads any input data, with every error it
// gives for them. `mha run` is plan -> load -> compute -> write (run.hpp);
// sweep validation (and so `mha sweep --dry_run`) runs the plan and the load
// checks and nothing else, so the two can never disagree about a config.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha/config/attention_axes.hpp"
#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/config/layer_weights.hpp"
#include "mha/config/memory.hpp"
#include "mha/config/weight_formats.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/npy.hpp"

namespace mha {

// The files a plan reads, each read once per path (a sweep plans many runs
// over the same files). .npy inputs: the header only. Weights: the arrays in
// native layout (their layout and h come from the arrays). A failed read is
// remembered and its message given again for every later use of the path.
class PlanFiles {
 public:
  const std::vector<std::size_t>& npy_shape(const std::string& path);
  DType npy_dtype(const std::string& path);  // after npy_shape(path) succeeded
  // One layer of a whole checkpoint with `layer_index` or `prefix` (presets.hpp).
  // The names and, with `max_bytes` (max_memory), the arrays' sizes are
  // checked from the .npy headers of an .npz or directory before its data
  // are read (read_weight_arrays).
  // `sizes`: the sizes (from the config or the input files' headers) the
  // arrays' headers are checked against before anything is inflated
  // (WeightsCheck::d_model ...; its other fields are ignored).
  // `preset`: the family weights_format names (format preset).
  // `keras_layer`: the layer to take from a Keras file (keras_file.hpp).
  const NativeWeights& weights(const std::string& path, WeightsFormat format,
                               const std::string& preset = "",
                               std::optional<std::int64_t> layer_index = std::nullopt,
                               const std::optional<std::string>& prefix = std::nullopt,
                               std::optional<std::uint64_t> max_bytes = std::nullopt,
                               const WeightsCheck* sizes = nullptr,
                               const std::optional<std::string>& keras_layer = std::nullopt);
  // A Transformer layer weights file, in native layer names.
  const NativeWeights& layer_weights(const std::string& path, WeightsFormat format,
                                     const std::string& preset = "",
                                     std::optional<std::int64_t> layer_index = std::nullopt,
                                     const std::optional<std::string>& prefix = std::nullopt,
                                     std::optional<std::uint64_t> max_bytes = std::nullopt,
                                     const std::optional<std::string>& keras_layer = std::nullopt);

 private:
  std::map<std::string, std::vector<std::size_t>> shapes_;
  std::map<std::string, DType> dtypes_;
  std::map<std::string, NativeWeights> weights_;
  std::map<std::string, std::string> errors_;  // path (or format:path) -> its read error
};

struct RunPlan {
  Config config;
  int threads = 1;     // resolved: config.threads, or default_threads()
  FileShapes shapes;   // the input files' shapes, flattened under attention_axes
  AttentionAxes axes;  // N-D inputs run as (B', L, F)
  const NativeWeights* weights = nullptr;  // in PlanFiles; null for random weights
  bool use_bias = true;                    // the config's, else as the weights file has them
  Dims dims;
  MemoryEstimate memory;
  // Transformer layers (config layer encoder or decoder): the stack's sizes,
  // dims being its self-attention's. Null for an attention run.
  std::optional<StackShape> stack;
};

// Checks, in `mha run`'s order and with its messages: the input files'
// headers, attention_axes, the weights file, every size (resolve_dims), the
// save_weights layout, the memory estimate against max_memory, and the input
// files' dtypes. Throws mha::Error (invalid_input).
RunPlan plan_run(const Config& config, PlanFiles& files);

// The checks that need array data but no computation, as the load stage
// makes them: the weights against the dims, and the mask (values, shape).
// Sweep validation calls this after plan_run; `mha run` meets the same
// checks while it loads.
void check_loadable(const RunPlan& plan);

}  // namespace mha
