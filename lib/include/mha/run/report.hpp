// run.json: what a run did, enough to reproduce it and to trust its outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/model/config.hpp"
#include "mha/model/dims.hpp"
#include "mha/model/layer_weights.hpp"

namespace mha {

// run.json's layout version (schemas/run.schema.json): raised when a key is
// removed, renamed or changes meaning; new keys keep it.
constexpr int kRunSchemaVersion = 1;

struct RunReport {
  Config config;           // as given
  Dims dims;               // as resolved
  double scale = 0;        // the logit scale used
  bool use_bias = true;    // as resolved
  int threads = 1;         // worker threads used
  nlohmann::json sources;  // tensor -> {"file": path} | {"random": ..., "seed": n}
  nlohmann::json outputs;  // file -> {"shape": [...], "dtype": ...}
  double load_ms = 0, compute_ms = 0, write_ms = 0;
  std::uint64_t peak_rss_bytes = 0;
  nlohmann::json attention_stats;  // AttentionStats::to_json() with save_attention or plot
  nlohmann::json output_stats;     // npy_stats() of output.npy, else null
  // Transformer layers: the stack's sizes (config gets num_layers, d_ff and
  // final_norm as resolved; flops count every layer) and, with
  // save_attention, per layer {"self_attention": stats, "cross_attention": stats}.
  std::optional<StackShape> stack;
  nlohmann::json layer_stats;

  nlohmann::json to_json() const;  // null members left out
};

// What lets a reader trust a written tensor without the tool: for the .npy
// file OutputSet::stage_npy writes from `data` (C order, `shape`; T float16,
// float or double, the dtype as written),
//   {"crc32": "89abcdef", "mean": m, "std": s, "min": lo, "max": hi}
// crc32 is zlib's (Python: zlib.crc32(open(path, "rb").read())) over the whole
// file, header then data, in 8 lowercase hex digits; mean and std (ddof 0, as
// NumPy's) in double; a value that is not finite (any NaN) is null.
template <class T>
nlohmann::json npy_stats(const T* data, const std::vector<std::size_t>& shape);

// Peak resident set size of this process so far, in bytes.
std::uint64_t peak_rss_bytes();

}  // namespace mha
