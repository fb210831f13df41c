// A stack of Transformer encoder or decoder layers around the attention
// kernel (docs/layers.md), inference only. Per layer, with x (B, T, d_model):
//
//   post-norm (norm_first false)            pre-norm (norm_first true)
//   x = norm1(x + SA(x))                    x = x + SA(norm1(x))
//   x = norm2(x + CA(x, memory))  decoder   x = x + CA(norm2(x), memory)
//   x = normF(x + FFN(x))                   x = x + FFN(normF(x))
//
// With sandwich norms (weights.hpp: post_attn, post_ffn; pre-norm) each
// block's output is normed before its residual add: x = x + post(SA(norm1(x))).
// With parallel_residual: x = x + (FFN(norm2(x)) + SA(norm1(x))).
// normF is norm2 in an encoder, norm3 in a decoder; FFN(x) = act(x W_1 +
// b_1) W_2 + b_2, or with a gate (act(x W_gate + b_gate) * (x W_1 + b_1))
// W_2 + b_2; norms are LayerNorms or RMSNorms (weights.hpp). After the last
// layer, final_norm if the weights have one.
// Every GEMM runs over all B*T rows at once, in row pieces fixed by the shape
// (so the bits do not depend on the thread count); the attentions run
// through attention_layer (fused unless maps are asked for). Each activation
// is shown to the hook at its site (site.hpp) as it is computed, and the
// pass goes on from what the hook leaves there. Memory: the
// weights plus four (B, T, d_model) activations and one (B, T, d_ff).
#pragma once

#include <cstddef>
#include <functional>

#include "mha/kernel/attention.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/kernel/options.hpp"
#include "mha/kernel/site.hpp"
#include "mha/kernel/weights.hpp"

namespace mha {

template <class T>
struct StackOptions {
  LayerKind kind = LayerKind::encoder;
  Activation activation = Activation::relu;
  bool norm_first = false;
  // Pre-norm encoders only: x = x + SA(norm1(x)) + FFN(norm2(x)), both on the
  // layer's input (GPT-NeoX's use_parallel_residual).
  bool parallel_residual = false;
  T eps = T(1e-5);
  int threads = 0;
  bool bf16_gemm = false;
  // The attentions' options (scale, masked_rows, attention output, ...).
  LayerOptions<T> self_attn, cross_attn;
  // Called before layer l's attentions run, to point their sinks at the
  // layer (attention maps); may be empty.
  std::function<void(std::size_t l, LayerOptions<T>& self, LayerOptions<T>& cross)> before_layer;
  // Called with each layer's output (B, T, d_model), before final_norm.
  std::function<void(std::size_t l, const T* hidden)> after_layer;
  // The activation sites (site.hpp) of every layer, named with `stack` and
  // layer first_layer + l, the attentions' included; null: none.
  SiteHook<T>* hook = nullptr;
  Stack stack = Stack::main;
  std::size_t first_layer = 0;
};

// x (B, T, d_model), memory (B, S, d_model) for decoders (else null);
// output (B, T, d_model) may not alias x.
template <class T>
void transformer_stack(const StackShape& shape, const T* x, const T* memory,
                       const StackWeights<T>& weights, const Mask<T>& self_mask,
                       const Mask<T>& cross_mask, const StackOptions<T>& options, T* output);

// y (rows, d) = LayerNorm(x) * gamma + beta, or RMSNorm(x) * gamma when
// norm.rms; statistics of each row in double.
template <class T>
void layer_norm(const T* x, std::size_t rows, std::size_t d, const Norm<T>& norm, T eps, T* y,
                int threads);

// act(x) in place over n values.
template <class T>
void activate(T* x, std::size_t n, Activation activation);

}  // namespace mha
