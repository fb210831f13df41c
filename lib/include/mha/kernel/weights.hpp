// The weights the kernel computes with, in this tool's native layout (x @ W,
// as in Keras and the paper). One multi-head attention layer:
//   W_q (d_model, h*d_k)  b_q (h*d_k)
//   W_k (kdim,    h*d_k)  b_k (h*d_k)
//   W_v (vdim,    h*d_v)  b_v (h*d_v)
//   W_o (h*d_v,   d_out)  b_o (d_out)
// Head i owns columns [i*d_k, (i+1)*d_k) of W_q and W_k and [i*d_v, (i+1)*d_v)
// of W_v, and rows [i*d_v, (i+1)*d_v) of W_o. A Transformer layer
// (transformer.hpp) adds its feed-forward and LayerNorms around one or two
// of them. config/weights.hpp and config/layer_weights.hpp read, draw and
// write them under their file names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mha/base/tensor.hpp"
#include "mha/kernel/dims.hpp"
#include "mha/kernel/options.hpp"

namespace mha {

// A weight matrix W (k, n) in the layout the native bfloat16 GEMM reads:
// ceil(k / 2) x n words, word (p, j) holding the bfloat16 bits of W[2p][j]
// in its low half and of W[2p + 1][j] (0 past k) in its high half. Made once
// when a layer is built (packed_weights.hpp), so that no call packs it again;
// empty: each bfloat16 call packs W itself. A packed matrix serves the W it
// was packed from (`of`: that W's data, checked by the kernel), or stands
// alone for an empty W (a checkpoint's layer read straight into this layout).
struct PackedBf16 {
  std::shared_ptr<std::uint32_t> words;
  std::size_t k = 0, n = 0;
  const void* of = nullptr;
  bool empty() const { return !words; }
};

template <class T>
struct Weights {
  Tensor<T, 2> W_q, W_k, W_v, W_o;
  Tensor<T, 1> b_q, b_k, b_v, b_o;  // empty when the layer has no biases
  // QK-norm (Qwen3, Gemma 3, OLMo 2): RMSNorm weights (d_k) of each head's q
  // and k, applied before RoPE; empty when the layer has none.
  Tensor<T, 1> q_norm, k_norm;
  // W_q ... W_o packed for bfloat16 GEMMs (float32 layers), or empty.
  PackedBf16 packed_q, packed_k, packed_v, packed_o;
  bool has_bias() const { return b_q.size() > 0; }
};

// LayerNorm's scale and shift (d_model), or with `rms` RMSNorm's scale
// (Zhang & Sennrich 2019; LLaMA): x / sqrt(mean(x^2) + eps) * gamma, no
// centring, no shift. Empty: no such norm.
template <class T>
struct Norm {
  Tensor<T, 1> gamma, beta;
  bool rms = false;
  bool empty() const { return gamma.size() == 0; }
};

// act(x W_1 + b_1) W_2 + b_2: W_1 (d_model, d_ff), W_2 (d_ff, d_model). With
// a gate (W_gate (d_model, d_ff), GLU variants such as LLaMA's SwiGLU,
// Shazeer 2020): (act(x W_gate + b_gate) * (x W_1 + b_1)) W_2 + b_2.
// Biases may be empty.
template <class T>
struct FeedForward {
  Tensor<T, 2> W_1, W_2, W_gate;
  Tensor<T, 1> b_1, b_2, b_gate;
  PackedBf16 packed_1, packed_2, packed_gate;  // as Weights' packed_q
  bool gated() const { return W_gate.size() > 0 || !packed_gate.empty(); }
};

template <class T>
struct TransformerLayer {
  Weights<T> self_attn;
  Weights<T> cross_attn;  // decoders; empty (0x0) for encoders
  FeedForward<T> ffn;
  Norm<T> norm1, norm2, norm3;  // norm3: decoders
  // Sandwich norms (Gemma 2 and 3), pre-norm only: on the attention's and
  // the feed-forward's outputs before each residual add; empty: none.
  Norm<T> post_attn, post_ffn;
};

template <class T>
struct StackWeights {
  std::vector<TransformerLayer<T>> layers;
  Norm<T> final_norm;  // empty without final_norm
};

// The sizes a stack's weights have.
struct StackShape {
  LayerKind kind = LayerKind::encoder;
  std::size_t num_layers = 1, d_ff = 1;
  bool final_norm = false;
  Dims self, cross;  // the attentions' (cross: decoders)
};

}  // namespace mha
