#include "mha/pipeline/seq2seq.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/kernel/transformer.hpp"
#include "mha/pipeline/lens.hpp"

namespace mha {

std::vector<float> relative_bias(const ModelConfig& c, const std::vector<float>& table,
                                 std::size_t L, bool bidirectional) {
  const std::size_t h = c.h;
  std::vector<std::size_t> bucket(2 * L - 1);  // of s - t + L - 1
  for (std::size_t i = 0; i < bucket.size(); ++i)
    bucket[i] =
        relative_position_bucket(static_cast<std::int64_t>(i) - std::int64_t(L - 1), bidirectional,
                                 c.relative_buckets, c.relative_max_distance);
  std::vector<float> bias(h * L * L);
  for (std::size_t head = 0; head < h; ++head)
    for (std::size_t t = 0; t < L; ++t)
      for (std::size_t s = 0; s < L; ++s)
        bias[(head * L + t) * L + s] = table[bucket[s + L - 1 - t] * h + head];
  return bias;
}

std::size_t relative_position_bucket(std::int64_t relative, bool bidirectional,
                                     std::size_t num_buckets, std::size_t max_distance) {
  std::size_t bucket = 0;
  std::int64_t n = static_cast<std::int64_t>(num_buckets);
  if (bidirectional) {
    n /= 2;
    if (relative > 0) bucket += static_cast<std::size_t>(n);
    relative = relative < 0 ? -relative : relative;
  } else {
    relative = relative < 0 ? -relative : 0;  // -min(relative, 0): keys after the query are 0
  }
  const std::int64_t max_exact = n / 2;
  if (relative < max_exact) return bucket + static_cast<std::size_t>(relative);
  // In float32 as torch computes it: log(relative.float() / max_exact) /
  // math.log(max_distance / max_exact) * (num_buckets - max_exact), truncated.
  const float ratio = static_cast<float>(relative) / static_cast<float>(max_exact);
  const float denominator = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / denominator * static_cast<float>(n - max_exact);
  const std::int64_t large =
      std::min<std::int64_t>(max_exact + static_cast<std::int64_t>(scaled), n - 1);
  return bucket + static_cast<std::size_t>(large);
}

std::vector<std::int32_t> decoder_inputs(const ModelConfig& c, const std::int32_t* target,
                                         std::size_t B, std::size_t T) {
  std::vector<std::int32_t> ids(B * T);
  for (std::size_t b = 0; b < B; ++b) {
    ids[b * T] = static_cast<std::int32_t>(c.decoder_start_token_id);
    std::copy_n(target + b * T, T - 1, ids.begin() + static_cast<std::ptrdiff_t>(b * T + 1));
  }
  return ids;
}

void seq2seq_logits(
    const Checkpoint& model, const float* hidden, std::size_t rows,
    const std::function<void(std::size_t r0, std::size_t n, const float* logits)>& fn,
    int threads) {
  const ModelConfig& c = model.config();
  const std::size_t d = c.d_model, V = c.vocab_size;
  std::vector<float> scaled;  // T5's sequence_output * d_model**-0.5, in float32
  if (c.lm_head_scale != 1) {
    const float scale = static_cast<float>(c.lm_head_scale);
    scaled.assign(hidden, hidden + rows * d);
    for (float& v : scaled) v *= scale;
    hidden = scaled.data();
  }
  const std::vector<float> bias = c.logits_bias ? model.logits_bias() : std::vector<float>{};
  std::vector<float> block;
  lm_logits(
      model, hidden, rows,
      [&](std::size_t r0, std::size_t n, const float* logits) {
        if (bias.empty()) return fn(r0, n, logits);
        block.assign(logits, logits + n * V);
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t v = 0; v < V; ++v) block[r * V + v] += bias[v];
        fn(r0, n, block.data());
      },
      threads);
}

std::uint64_t seq2seq_memory(const ModelConfig& c, std::uint64_t layer_bytes, std::size_t B,
                             std::size_t S, std::size_t T, int threads) {
  using u128 = unsigned __int128;
  const u128 d = c.d_model, q = u128{c.h} * c.head_dim;
  u128 bytes = forward_memory(c, layer_bytes, B, std::max(S, T), threads);
  bytes += 4 * u128{B} * S * d;      // the encoder's output, kept for the decoder
  bytes += 4 * u128{B} * S * 2 * q;  // the cross-attention's keys and values
  bytes += 4 * u128(resolve_threads(threads)) * 64 * S;  // cross-attention slabs
  if (c.relative_buckets)  // the position biases (h, S, S) and (h, T, T)
    bytes += 4 * u128{c.h} * (u128{S} * S + u128{T} * T);
  const u128 most = std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::min(bytes, most));
}

}  // namespace mha
