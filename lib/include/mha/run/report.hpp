// What a run did, enough to reproduce it and to trust its outputs: the
// contents of run.json as a struct. run/run_json.hpp writes and reads the
// file; everything else reads the fields.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/config/layer_weights.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/kernel/blas.hpp"

namespace mha {

// run.json's layout version (schemas/run.schema.json): raised when a key is
// removed, renamed or changes meaning; new keys keep it.
constexpr int kRunSchemaVersion = 1;

// Where one input or weight tensor came from.
struct Source {
  enum class Kind { file, random, zeros, same_as };
  Kind kind = Kind::file;
  std::string file;        // file: its path
  std::string layout;      // file of weights: the layout it was read in; "" for inputs
  std::string random;      // random: the distribution drawn from
  std::uint64_t seed = 0;  // random
  std::string same_as;     // same_as: the tensor this one is ("query", "key")

  static Source from_file(const std::string& path, const std::string& layout = "");
  static Source drawn(const std::string& distribution, std::uint64_t seed);
  static Source zeros();
  static Source alias(const std::string& tensor);
};

// attention.png: its size and how batch 0's maps were drawn into it.
struct PlotFile {
  int width = 0, height = 0;
  std::size_t batch = 0;                  // the batch element drawn
  std::size_t panels = 0;                 // one per head, or one for the mean over heads
  std::array<std::size_t, 2> cells = {};  // rows, columns of cells in each panel
  std::array<int, 2> cell_px = {};        // a cell's width and height in pixels
  std::size_t downsample = 1;             // map rows and columns per cell side
  std::string reduce, color_scale;        // heatmap.hpp's Reduce and ColorScale, by name
  std::array<double, 2> color_range = {};
};

// One file written into out_dir; which members are set depends on the file.
struct OutputFile {
  std::optional<std::vector<std::size_t>> shape;  // .npy
  std::optional<std::string> dtype;               // .npy and weights.npz
  std::optional<std::string> layout;              // weights.npz
  std::optional<PlotFile> plot;                   // attention.png
  // The whole file's size and crc32 (8 lowercase hex digits), which readers
  // check it against (io/out_dir.hpp); absent from run.json files written
  // before outputs carried checksums.
  std::optional<std::uint64_t> bytes;
  std::optional<std::string> crc32;
};

// Of a written .npy file (see npy_stats); a statistic that is not finite
// (any NaN, or no values) is nullopt.
struct NpyStats {
  std::string crc32;  // 8 lowercase hex digits
  std::optional<double> mean, std, min, max;
};

// An AttentionStats summed up: its heads and their mean (AttentionStats::to_json's numbers).
struct AttentionSummary {
  std::vector<HeadStats> heads;
  HeadStats mean;
  bool averaged_over_heads = false;  // the maps were the mean over heads (one "head")
};
AttentionSummary summarize(const AttentionStats& stats, bool averaged_over_heads);

// One Transformer layer's attention maps, with save_attention.
struct LayerAttention {
  AttentionSummary self_attention;
  std::optional<AttentionSummary> cross_attention;  // decoders
};

// attention_axes runs: the N-D layout the flattened (B', L, F) run came from.
struct AxesReport {
  std::vector<std::size_t> axes;  // normalized, as given
  std::vector<std::size_t> query_shape, key_shape;
};

// The vector kernels a run used (kernel/blas.hpp's direct_gemm_isa, kernel/vexp.hpp's vexp_isa).
struct KernelReport {
  std::string direct_gemm, exp;
};

// With repeat > 1: the layer's forward timed `samples.size()` times after
// the run's own compute and one discarded warm call (run.json's
// timings_ms.compute_repeat).
struct RepeatTimes {
  std::vector<double> samples;  // ms, in call order
  double median = 0, min = 0, max = 0;

  // The summary of `samples` (at least one): the median is the mean of the two
  // middle values for an even count, as NumPy's.
  static RepeatTimes of(std::vector<double> samples);
};

struct StageTimes {
  double load_ms = 0;  // the plan and the load
  double compute_ms = 0, write_ms = 0;
  std::optional<RepeatTimes> compute_repeat = std::nullopt;
};

struct RunReport {
  std::string tool_version;  // the mha that wrote it
  Config config;             // as given (read from run.json: as resolved_config() made it)
  Dims dims;                 // as resolved
  double scale = 0;          // the logit scale used
  bool use_bias = true;      // as resolved
  int threads = 1;           // worker threads used
  // Transformer layers: the stack's sizes (dims being its self-attention's).
  std::optional<StackShape> stack;
  std::map<std::string, Source> sources;      // by tensor name: query, key, value, W_q, ...
  std::map<std::string, OutputFile> outputs;  // by file name
  std::uint64_t flops = 0;                    // every layer's, with stacks (run_flops)
  StageTimes timings;
  double gflops_per_s = 0;  // flops / compute time
  std::uint64_t peak_rss_bytes = 0;
  std::optional<NpyStats> output_stats;  // of output.npy as written
  // With save_attention or plot: the maps' statistics (attention runs), or
  // each layer's (stacks with save_attention).
  std::optional<AttentionSummary> attention_stats;
  std::vector<LayerAttention> layer_stats;
  std::optional<AxesReport> attention_axes;
  std::optional<std::string> bf16_gemm;  // dtype bfloat16: bf16_gemm_backend()
  BlasInfo blas;
  std::optional<KernelReport> kernels;

  // The config with what the run resolved in place of what it left open:
  // every size, the scale, use_bias, threads and the stack's shape
  // (run.json's "config").
  Config resolved_config() const;
};

// Multiply-adds x 2 of a run: the attention's (Dims::flops), or every
// layer's attentions and feed-forward GEMMs for a stack.
std::uint64_t run_flops(const Dims& dims, const std::optional<StackShape>& stack);

// What lets a reader trust a written tensor without the tool: for the .npy
// file OutputSet::stage_npy writes from `data` (C order, `shape`; T float16,
// float or double, the dtype as written): crc32 is zlib's (Python:
// zlib.crc32(open(path, "rb").read())) over the whole file, header then data;
// mean and std (ddof 0, as NumPy's) in double.
template <class T>
NpyStats npy_stats(const T* data, const std::vector<std::size_t>& shape);

// Peak resident set size of this process so far, in bytes.
std::uint64_t peak_rss_bytes();

}  // namespace mha
