// The multi-head attention kernel (Vaswani et al. 2017, section 3.2.2):
//   Q_i = X_q W_q[:, i*d_k:(i+1)*d_k] + b_q[i*d_k:(i+1)*d_k]   (K_i, V_i likewise)
//   A_i = softmax(scale * Q_i K_i^T + M)                        M: mask, 0 or -inf
//   output = concat_i(A_i V_i) W_o + b_o
// scale is 1/sqrt(d_k) with the per-head d_k, not the total width h*d_k.
#pragma once

#include "mha/config.hpp"
#include "mha/dims.hpp"
#include "mha/mask.hpp"
#include "mha/weights.hpp"

namespace mha {

// X_q (B, T, d_model), X_k (B, S, kdim), X_v (B, S, vdim): C-order buffers;
// X_k and X_v may alias X_q (self-attention).
// output (B, T, d_out); attention (B, h, T, S) or null; attention_mean
// (B, T, S) = attention averaged over heads, or null.
// A query row whose keys are all masked gets `masked_rows`: zero (weights and
// head output 0), uniform (1/S over all keys) or nan.
template <class T>
void multi_head_attention(const Dims& dims, const T* X_q, const T* X_k, const T* X_v,
                          const Weights<T>& weights, const Mask<T>& mask, T scale,
                          MaskedRows masked_rows, T* output, T* attention, T* attention_mean);

// softmax over each of `rows` rows of `cols` logits (row r at x + r * ld), in
// place; a row of only -inf gets the masked_rows policy.
template <class T>
void softmax_rows(T* x, std::size_t rows, std::size_t cols, std::size_t ld, MaskedRows masked_rows);

}  // namespace mha
