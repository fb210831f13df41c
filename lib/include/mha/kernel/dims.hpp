// The sizes of one multi-head attention problem, in the paper's names.
// config/dims.hpp resolves them from a config and the shapes of its files.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace mha
