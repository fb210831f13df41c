// The sizes of one multi-head attention problem, in the paper's names, and
// how they are resolved from the config and the shapes of the given files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha/model/config.hpp"

namespace mha {

struct Dims {
  std::size_t B = 1;        // batch
  std::size_t T = 1;        // query length (seq_len)
  std::size_t S = 1;        // key/value length (kv_seq_len)
  std::size_t h = 1;        // heads
  std::size_t d_model = 1;  // query feature size
  std::size_t d_k = 1;      // per-head query/key size
  std::size_t d_v = 1;      // per-head value size
  std::size_t kdim = 1;     // key feature size
  std::size_t vdim = 1;     // value feature size
  std::size_t d_out = 1;    // output feature size
  // Key/value heads (grouped-query attention): query head i reads key/value
  // head i / (h / kv_heads). 0 means h, plain multi-head attention; 1 is
  // multi-query attention.
  std::size_t kv_heads = 0;
  bool key_is_query = true;  // self-attention: key (and value) are the query tensor
  bool value_is_key = true;  // value is the key tensor

  std::size_t kv() const { return kv_heads ? kv_heads : h; }
  std::size_t group() const { return h / kv(); }  // query heads per key/value head

  // Multiply-adds counted as 2 FLOPs: the four projections, Q K^T and A V.
  // Softmax and masking are not counted (O(B h T S), not O(... d)).
  std::uint64_t flops() const;
};

// Shapes of whatever tensors came from files; absent ones are random.
struct FileShapes {
  std::optional<std::vector<std::size_t>> query, key, value;
  std::string query_name, key_name, value_name;             // paths, for messages
  std::map<std::string, std::vector<std::size_t>> weights;  // native "W_q" -> shape
  std::optional<std::size_t> weights_h;  // when the weights layout stores h (keras)
  std::string weights_name;
};

// Fills every size from the config, the files and the documented defaults.
// Throws mha::Error (invalid_input) naming the key and the file whenever they
// disagree or a size is missing.
Dims resolve_dims(const Config& config, const FileShapes& files);

}  // namespace mha
