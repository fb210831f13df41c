// The projection weights of one multi-head attention layer, in this tool's
// native layout (x @ W, as in Keras and the paper):
//   W_q (d_model, h*d_k)  b_q (h*d_k)
//   W_k (kdim,    h*d_k)  b_k (h*d_k)
//   W_v (vdim,    h*d_v)  b_v (h*d_v)
//   W_o (h*d_v,   d_out)  b_o (d_out)
// Head i owns columns [i*d_k, (i+1)*d_k) of W_q and W_k and [i*d_v, (i+1)*d_v)
// of W_v, and rows [i*d_v, (i+1)*d_v) of W_o.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mha/base/tensor.hpp"
#include "mha/io/npy.hpp"
#include "mha/model/dims.hpp"

namespace mha {

template <class T>
struct Weights {
  Tensor<T, 2> W_q, W_k, W_v, W_o;
  Tensor<T, 1> b_q, b_k, b_v, b_o;  // empty when the layer has no biases
  // QK-norm (Qwen3, Gemma 3, OLMo 2): RMSNorm weights (d_k) of each head's q
  // and k, applied before RoPE; empty when the layer has none.
  Tensor<T, 1> q_norm, k_norm;
  bool has_bias() const { return b_q.size() > 0; }
};

// The native tensor names, in file order.
const std::vector<std::string>& weight_names(bool use_bias);

// Reads the arrays of a weights file: an .npz archive, or a directory of
// NAME.npy. Names are checked when converted (weight_formats.hpp).
std::map<std::string, NpyArray> read_weight_arrays(const std::string& path);

// Checks every tensor's presence and shape against `dims` and converts to T.
// Errors name the tensor, its shape and the expected shape. `prefix` is put
// before every name ("layers.0.self_attn.": docs/layers.md).
template <class T>
Weights<T> weights_from_arrays(const std::map<std::string, NpyArray>& arrays, const Dims& dims,
                               bool use_bias, const std::string& path,
                               const std::string& prefix = "");

// Glorot-uniform kernels (fan_in = rows, fan_out = columns) and zero biases,
// drawn from the streams "W_q", "W_k", ... (after `prefix`) of `seed`.
template <class T>
Weights<T> random_weights(const Dims& dims, bool use_bias, std::uint64_t seed, int threads = 0,
                          const std::string& prefix = "");

// Named arrays for writing weights.npz in the native layout.
template <class T>
std::vector<std::pair<std::string, NpyArray>> weight_arrays(const Weights<T>& weights,
                                                            const std::string& prefix = "");

}  // namespace mha
