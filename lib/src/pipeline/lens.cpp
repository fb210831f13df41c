#include "mha/pipeline/lens.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/transformer.hpp"

namespace mha {

namespace {

// Hidden rows per piece: as many as keep a piece's logits within 64 MiB (at
// least 256), so that the LM head is read once for most calls.
constexpr std::size_t kLogitBytes = std::size_t{64} << 20;
constexpr std::size_t kHeadRows = 4096;  // LM head rows read at a time
// A piece's GEMM is cut into this many blocks of rows, run side by side:
// blocks that follow the shape alone, never the threads, give the same bits
// for any thread count.
constexpr std::size_t kRowBlocks = 8;

}  // namespace

void lm_logits(const Checkpoint& model, const float* hidden, std::size_t rows,
               const std::function<void(std::size_t r0, std::size_t n, const float* logits)>& fn,
               int threads) {
  const ModelConfig& c = model.config();
  if (!c.has_lm_head()) fail_input(model.dir() + ": a " + c.model_type + " has no LM head");
  const std::size_t d = c.d_model, V = c.vocab_size;
  const std::size_t kRows = std::max<std::size_t>(256, kLogitBytes / (4 * V));
  std::vector<float> logits(std::min(rows, kRows) * V), head(std::min(V, kHeadRows) * d);
  const float cap = static_cast<float>(c.final_softcap);
  for (std::size_t r0 = 0; r0 < rows; r0 += kRows) {
    const std::size_t n = std::min(kRows, rows - r0);
    const std::size_t per = (n + kRowBlocks - 1) / kRowBlocks, blocks = (n + per - 1) / per;
    for (std::size_t v0 = 0; v0 < V; v0 += kHeadRows) {
      const std::size_t m = std::min(kHeadRows, V - v0);
      model.lm_head_rows(v0, m, head.data());
      // logits[:, v0:v0+m] (n, m) = hidden[r0:r0+n] (n, d) head^T (d, m), in blocks of rows
      parallel_for(blocks, threads, [&](std::size_t k, int) {
        const std::size_t i0 = k * per, rows_k = std::min(per, n - i0);
        gemm<float>(false, true, rows_k, m, d, 1.0f, hidden + (r0 + i0) * d, d, head.data(), d,
                    0.0f, logits.data() + i0 * V + v0, V, model.compute() == ComputeType::bfloat16);
      });
    }
    if (cap > 0)
      for (std::size_t i = 0; i < n * V; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    fn(r0, n, logits.data());
  }
}

Softmax softmax_of(const float* logits, std::size_t vocab) {
  Softmax s;
  s.top = logits[0];
  for (std::size_t v = 0; v < vocab; ++v) s.top = std::max(s.top, double(logits[v]));
  for (std::size_t v = 0; v < vocab; ++v) s.sum += std::exp(double(logits[v]) - s.top);
  return s;
}

TokenScore score_token(const float* logits, std::size_t vocab, std::int32_t next,
                       const Softmax& s) {
  std::int64_t above = 0;
  const float target = logits[next];
  for (std::size_t v = 0; v < vocab; ++v)  // ties broken by id, as the top-k lists order them
    above += logits[v] > target || (logits[v] == target && v < static_cast<std::size_t>(next));
  return {s.log_p(target), above};
}

TokenLoss token_loss(const Checkpoint& model, const float* output, const std::int32_t* ids,
                     std::size_t B, std::size_t T, const std::vector<std::size_t>& lengths,
                     int threads) {
  const std::size_t V = model.config().vocab_size;
  TokenLoss out;
  out.loss.assign(B * T, std::numeric_limits<double>::quiet_NaN());
  double sum = 0;
  lm_logits(
      model, output, B * T,
      [&](std::size_t r0, std::size_t n, const float* logits) {
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t r = r0 + i, b = r / T, t = r % T;
          if (t + 1 >= lengths[b]) continue;
          const float* z = logits + i * V;
          const double loss = -score_token(z, V, ids[b * T + t + 1], softmax_of(z, V)).log_p;
          out.loss[r] = loss;
          sum += loss;
          ++out.tokens;
        }
      },
      threads);
  out.mean_loss = out.tokens ? sum / double(out.tokens) : std::numeric_limits<double>::quiet_NaN();
  out.perplexity = std::exp(out.mean_loss);
  return out;
}

LogitLens logit_lens(const Checkpoint& model, const float* hidden_states, std::size_t B,
                     std::size_t T, const std::int32_t* ids,
                     const std::vector<std::size_t>& lengths, std::size_t k, int threads) {
  const ModelConfig& c = model.config();
  const std::size_t d = c.d_model, V = c.vocab_size, L = c.num_layers, rows = B * T;
  LogitLens out;
  out.states = L + 1, out.B = B, out.T = T, out.k = k = std::min(k, V);
  out.top_ids.assign(out.states * rows * k, -1);
  out.top_p.assign(out.states * rows * k, std::numeric_limits<float>::quiet_NaN());
  out.p_next.assign(out.states * rows, std::numeric_limits<float>::quiet_NaN());
  out.rank_next.assign(out.states * rows, -1);
  const Norm<float> final = model.final_norm();
  std::vector<float> normed(rows * d);
  std::vector<std::int32_t> order(V);
  for (std::size_t s = 0; s < out.states; ++s) {
    const float* h = hidden_states + s * rows * d;
    if (s < L && !final.empty()) {  // state L is the model's output, normed already
      layer_norm(h, rows, d, final, static_cast<float>(c.norm_eps), normed.data(), threads);
      h = normed.data();
    }
    lm_logits(
        model, h, rows,
        [&](std::size_t r0, std::size_t n, const float* logits) {
          for (std::size_t i = 0; i < n; ++i) {
            const std::size_t r = r0 + i, b = r / T, t = r % T, at = s * rows + r;
            if (t >= lengths[b]) continue;
            const float* z = logits + i * V;
            const Softmax sm = softmax_of(z, V);
            for (std::size_t v = 0; v < V; ++v) order[v] = static_cast<std::int32_t>(v);
            std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k),
                              order.end(), [&](std::int32_t x, std::int32_t y) {
                                return z[x] > z[y] || (z[x] == z[y] && x < y);
                              });
            for (std::size_t j = 0; j < k; ++j) {
              out.top_ids[at * k + j] = order[j];
              out.top_p[at * k + j] = static_cast<float>(sm.p(z[order[j]]));
            }
            if (t + 1 < lengths[b]) {
              const TokenScore next = score_token(z, V, ids[b * T + t + 1], sm);
              out.p_next[at] = static_cast<float>(std::exp(next.log_p));
              out.rank_next[at] = next.rank;
            }
          }
        },
        threads);
  }
  return out;
}

}  // namespace mha
