// What is in a .npy file (or each member of an .npz): its header as written,
// statistics of its values and, for attention maps, per-head attention
// statistics (mha::AttentionStats). Files are streamed in chunks of a few MiB,
// so an 8 GiB attention.npy is inspected with O(chunk) memory.
//
//   mha::InspectOptions options;                  // detect attention from the rows
//   mha::InspectResult r = mha::inspect_npy("out/attention.npy", options);
//   r.header.shape;                               // {B, h, T, S}
//   r.stats.mean;                                 // of the finite values
//   if (r.attention) r.attention->stats->mean().entropy;
//   nlohmann::json j = r.to_json();               // {"file", "header", "stats", "attention"}
//
// Attention: an array of rank >= 2 whose last two axes are (T, S), rows of S
// weights. Its leading axes are batch axes, except that one may hold heads:
//   rank 2 (T, S)        one map, one head
//   rank 3 (B, T, S)     a batch of maps, one head (e.g. averaged over heads)
//   rank 4 (B, h, T, S)  axis 1 holds the heads (this tool, PyTorch, Keras)
//   rank >= 5            batch axes only, one head
// unless heads_axis names another leading axis.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/inspect/attention_stats.hpp"
#include "mha/io/npy.hpp"

namespace mha {

struct InspectOptions {
  // Whether to treat arrays as attention maps: detect it (from the file name
  // attention.npy, or from every row being a distribution), or force it on or off.
  enum class Attention { detect, on, off };
  Attention attention = Attention::detect;
  // The leading axis that holds heads (negative counts from the end, as in
  // NumPy); none: axis 1 of a rank-4 array, else no heads axis.
  std::optional<long> heads_axis;
  // Bytes read at a time (at least one row of an attention map is held).
  std::size_t chunk_bytes = std::size_t{4} << 20;
  // A model run's padded batch (its tokens.json): each batch row's real queries and keys.
  // Rows are padded on the right; an attention array whose batch axis (after the layers
  // axis of self_attention.npy and the like, else the first that is not heads) holds this
  // many rows, within T and S, has its padded query rows left out (padded_rows) and its
  // padded keys cut from every row. Empty: every row and key is real.
  std::vector<std::size_t> query_lengths, key_lengths;
};

// Statistics of an array's values, in double. NaN and +-Inf are counted and
// left out of min, max, mean and std (ddof 0): np.mean(a[np.isfinite(a)]).
// With no finite value, mean and std are NaN and min and max null. Bools
// count as 0 and 1.
struct TensorStats {
  std::uint64_t count = 0, finite = 0, nan = 0, posinf = 0, neginf = 0, zeros = 0;
  // Integers and bools exactly as integers (a double rounds above 2^53),
  // floats as double; null when there is no finite value.
  nlohmann::json min, max;
  double mean = 0, std = 0;

  nlohmann::json to_json() const;  // the fields by name; NaN as null
};

// How an attention array was recognised and read.
struct AttentionInfo {
  std::string detected_by;  // "file name", "--attention" or "rows"
  std::string layout;       // "(B, h, T, S)": axis names, h for heads, layers for a stack's
  std::optional<std::size_t> heads_axis;
  std::size_t T = 0, S = 0;
  // Rows by kind: distributions (values in [0, 1] within 1e-6, sum within
  // 1e-3 of 1), fully masked (all zero or all NaN) and the others.
  std::uint64_t distribution_rows = 0, masked_rows = 0, other_rows = 0;
  // Query rows of padding (InspectOptions::query_lengths), in none of the counts above.
  std::uint64_t padded_rows = 0;
  std::optional<std::size_t> batch_axis;  // when the lengths were used: the axis they index
  std::unique_ptr<AttentionStats> stats;  // heads: 1 without a heads axis

  // AttentionStats::to_json() with layout, heads_axis, detected_by and the row counts.
  nlohmann::json to_json() const;
};

struct InspectResult {
  std::string file;  // the path, or "archive.npz:member"
  NpyHeaderInfo header;
  TensorStats stats;
  std::optional<AttentionInfo> attention;  // when the array was taken as attention

  // {"file", "header", "stats", "attention"}; "attention" only when present.
  nlohmann::json to_json() const;
};

// The header as JSON: version ("1.0"), descr, dtype ("float32"), byte_order
// ("little", "big", or "none" for one-byte items), fortran_order, shape,
// header_bytes, data_bytes.
nlohmann::json header_json(const NpyHeaderInfo& header);

using Warn = std::function<void(const std::string&)>;

// Inspects one .npy file. C-order files are streamed in chunks of
// options.chunk_bytes; Fortran-order files with more than one axis longer than
// 1 are read whole (read_npy). Throws mha::Error (invalid_input) on a missing
// or malformed file, with read_npy's messages, and on options that do not fit
// the array (heads_axis out of range, --attention on an integer array).
// Warnings (attention by name whose rows are not all distributions) go to `warn`.
InspectResult inspect_npy(const std::string& path, const InspectOptions& options,
                          const Warn& warn = {});

// Every array of `path`: one for a .npy, each member of a .npz (by its name
// ending, or its zip magic), in archive order. An .npz's member headers are
// all read and checked first (read_npz's checks and limits), then each
// member is streamed from the archive as it is scanned (Fortran-order
// members are read whole, one at a time).
std::vector<InspectResult> inspect_file(const std::string& path, const InspectOptions& options,
                                        const Warn& warn = {});

}  // namespace mha
