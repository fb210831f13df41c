// The multi-head attention kernel (Vaswani et al. 2017, section 3.2.2):
//   Q_i = X_q W_q[:, i*d_k:(i+1)*d_k] + b_q[i*d_k:(i+1)*d_k]   (K_i, V_i likewise)
//   A_i = softmax(scale * Q_i K_i^T + M)                        M: mask, 0 or -inf
//   output = concat_i(A_i V_i) W_o + b_o
// scale is 1/sqrt(d_k) with the per-head d_k, not the total width h*d_k.
//
// Work plan: the projections are GEMMs over all B*T (B*S) rows, cut into
// row pieces, with Q, K and V written side by side into one buffer for
// self-attention ([K | V] when value = key); each head's Q_i, K_i, V_i is
// then addressed in place by offset and leading dimension. Attention runs as
// tasks over (batch, head, query block) on the process's thread pool
// (thread_pool.hpp), with BLAS single-threaded inside each task. Every piece,
// split and block depends on the shape alone, so the output has the same
// bits for any thread count:
//   - attention not requested: a fused kernel with online softmax over key
//     blocks (memory O(T*d) plus per-thread scratch, never O(T*S)); key blocks
//     that causality or key_lengths mask entirely are skipped; with fewer
//     than 8 head blocks (decode: T = 1, long S) the keys are split into tasks
//     merged in a fixed order;
//   - attention requested: the exact path computes each (query block, S) slab
//     of A_i straight into the caller's buffer, or hands it to a sink that can
//     stream it to disk, so nothing larger than a slab per thread is held.
#pragma once

#include <cstddef>
#include <functional>

#include "mha/kernel/dims.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/kernel/options.hpp"
#include "mha/kernel/site.hpp"
#include "mha/kernel/weights.hpp"

namespace mha {

struct StageProgress;  // base/progress.hpp: only pointed to here

enum class AttentionOutput { none, per_head, mean_over_heads };

// Receives attention rows [t0, t0 + rows) of head `head` (0 for the mean over
// heads) of batch b: a C-order (rows, S) block. Called from worker threads,
// possibly concurrently for different blocks; blocks arrive in no fixed order.
template <class T>
using AttentionSink = std::function<void(std::size_t b, std::size_t head, std::size_t t0,
                                         std::size_t rows, const T* block)>;

// Rotary position embeddings (RoPE, Su et al. 2021) on each head's q and k,
// after the projections: the first `dim` features of a head (all d_k when 0)
// rotate in pairs by angle position * theta^(-2i/dim), pairs (i, i + dim/2)
// (half: GPT-NeoX, LLaMA) or (2i, 2i + 1) (interleaved: GPT-J). Queries sit at
// positions offset + t, keys at s; positions are divided by `scaling`
// (linear position interpolation).
enum class RopeLayout { none, half, interleaved };
struct Rope {
  RopeLayout layout = RopeLayout::none;
  double theta = 10000;
  std::size_t dim = 0;
  std::size_t offset = 0;
  double scaling = 1;
};

template <class T>
struct LayerOptions {
  T scale = 1;
  T softcap = 0;  // > 0: logits <- softcap * tanh(logits / softcap), before the mask
  MaskedRows masked_rows = MaskedRows::zero;
  int threads = 0;  // 0: default_threads() (OMP_NUM_THREADS, else the CPUs this process may use)
  AttentionOutput attention = AttentionOutput::none;
  // Where attention goes when requested: straight into `attention_buffer`
  // ((B,h,T,S) or (B,T,S)) if set, else to `sink`.
  T* attention_buffer = nullptr;
  AttentionSink<T> sink;
  // Block sizes (0: defaults chosen for the cache sizes of current CPUs).
  std::size_t block_q = 0, block_k = 0;
  // Logits that overflow T make their query rows NaN; without this flag the
  // call throws mha::Error (invalid_input) instead, after the attention sink
  // may already have seen some blocks.
  bool allow_nonfinite = false;
  // float only (dtype bfloat16): every GEMM takes bfloat16-rounded operands
  // and sums in float32 (see gemm in blas.hpp); softmax, masks and biases
  // stay float32.
  bool bf16_gemm = false;
  // If set, the attention blocks (tasks) are counted into it as they finish.
  StageProgress* progress = nullptr;
  Rope rope;
  T qk_norm_eps = T(1e-6);  // with the weights' q_norm and k_norm (weights.hpp)
  // The attention's activation sites (site.hpp), offered to hook->wants()
  // with `site`'s stack and layer: q, k, v (after QK-norm and RoPE, as the
  // scores use them) and z (the heads' outputs before the output projection)
  // whole, scores and pattern in blocks (the exact path, whatever
  // `attention` says); the cross_ kinds when `cross`. What the hook leaves in
  // them is what the layer goes on with. Null: no sites, the fastest path.
  SiteHook<T>* hook = nullptr;
  Site site;
  bool cross = false;
};

// X_q (B, T, d_model), X_k (B, S, kdim), X_v (B, S, vdim): C-order buffers;
// X_k and X_v may be the same pointer as X_q (self-attention: one fused QKV
// GEMM) and X_v the same as X_k (one KV GEMM).
// output (B, T, d_out). A query row whose keys are all masked gets
// `masked_rows`: zero (weights and head output 0), uniform (1/S over all
// keys) or nan.
template <class T>
void attention_layer(const Dims& dims, const T* X_q, const T* X_k, const T* X_v,
                     const Weights<T>& weights, const Mask<T>& mask, const LayerOptions<T>& options,
                     T* output);

// The same, with attention (B, h, T, S) and/or its mean over heads (B, T, S)
// written to the given buffers when not null. Single call, default blocks.
template <class T>
void multi_head_attention(const Dims& dims, const T* X_q, const T* X_k, const T* X_v,
                          const Weights<T>& weights, const Mask<T>& mask, T scale,
                          MaskedRows masked_rows, T* output, T* attention, T* attention_mean);

// softmax over each of `rows` rows of `cols` logits (row r at x + r * ld), in
// place; a row of only -inf gets the masked_rows policy.
template <class T>
void softmax_rows(T* x, std::size_t rows, std::size_t cols, std::size_t ld, MaskedRows masked_rows);

}  // namespace mha
