// Which keys each query may attend to, as the kernel applies it. The
// sources combine:
//   causal       top-left: query t sees keys s <= t;
//                bottom-right: s <= t + S - T (the last query sees every key);
//   mask         (T,S), (B,T,S) or (B',h',T,S) with B' in {1,B} and h' in
//                {1,h}, held as (mask_B, mask_h, T, S): bool, 1 = may attend,
//                or float, added to the scaled logits (-inf masks);
//   key_lengths  B lengths: keys s >= key_lengths[b] are padding;
//   key_padding_mask  (B, S): bool, 1 = may attend, or float added to every
//                query's logit for key s;
//   window, ALiBi and a float bias broadcast to (B, h, T, S), as below.
// A masked logit becomes -inf before the softmax. config/mask_file.hpp builds
// a Mask from a config's .npy files and keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mha/kernel/dims.hpp"
#include "mha/kernel/options.hpp"

namespace mha {

template <class T>
struct Mask {
  Causal causal = Causal::none;
  std::size_t mask_B = 0, mask_h = 0;     // 0 = no explicit mask; else 1 or B, 1 or h
  std::vector<unsigned char> allow;       // bool mask (mask_B, mask_h, T, S), 1 = may attend
  std::vector<T> bias;                    // float mask (mask_B, mask_h, T, S), added to logits
  std::vector<std::int64_t> key_lengths;  // empty = no padding
  std::vector<unsigned char> pad_allow;   // key_padding_mask (B, S) as bool, 1 = may attend
  std::vector<T> pad_bias;                // key_padding_mask (B, S) as float, added
  // Sliding window: query t sees keys s with |t' - s| < window, t' the query's
  // position aligned as causality aligns it (t, or t + S - T bottom-right).
  std::size_t window = 0;  // 0 = none
  // ALiBi: -alibi_slopes[head] * |t' - s| added to head's logits.
  std::vector<T> alibi_slopes;  // empty = none
  // A float bias broadcast to (B, h, T, S): element (b, head, t, s) is
  // position_bias[b*strides[0] + head*strides[1] + t*strides[2] + s*strides[3]],
  // stride 0 along broadcast axes.
  std::vector<T> position_bias;  // empty = none
  std::size_t bias_strides[4] = {0, 0, 0, 0};

  bool empty() const {
    return causal == Causal::none && mask_B == 0 && key_lengths.empty() && pad_allow.empty() &&
           pad_bias.empty() && window == 0 && alibi_slopes.empty() && position_bias.empty();
  }

  // logits: rows [t0, t1) and key columns [s0, s1) of head `head` of batch
  // `b`; the logit of (t, s) is at logits[(t - t0) * ld + (s - s0)]. Masked
  // entries become -inf and float masks are added. The logits are already scaled.
  void apply(const Dims& dims, std::size_t b, std::size_t head, std::size_t t0, std::size_t t1,
             std::size_t s0, std::size_t s1, T* logits, std::size_t ld) const;
  void apply(const Dims& dims, std::size_t b, std::size_t head, std::size_t t0, std::size_t t1,
             T* logits, std::size_t ld) const {
    apply(dims, b, head, t0, t1, 0, dims.S, logits, ld);
  }

  // Keys s >= key_end(b, t) are masked for query t by causality, key
  // padding (key_lengths) and the window, and keys s < key_begin(t) by the
  // window; the fused kernel skips such key blocks. key_begin never decreases
  // with t, nor does key_end.
  std::size_t key_end(const Dims& dims, std::size_t b, std::size_t t) const;
  std::size_t key_begin(const Dims& dims, std::size_t t) const;
  // Query t's position on the key axis: t, or t + S - T under bottom-right
  // causality (may be negative when T > S).
  std::int64_t aligned(const Dims& dims, std::size_t t) const;
};

// ALiBi slopes for h heads (Press et al. 2022): for h a power of two,
// 2^(-8 i / h) for i = 1..h; otherwise those of the largest power of two
// n < h, followed by every other slope of 2n, as the paper's reference does.
std::vector<double> alibi_slopes(std::size_t h);

}  // namespace mha
