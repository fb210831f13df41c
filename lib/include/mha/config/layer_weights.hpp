// The weights of a stack of Transformer encoder or decoder layers
// (StackWeights<T> in kernel/weights.hpp; docs/layers.md), in native names
// per layer:
//
//   layers.N.self_attn.{W_q,b_q,W_k,b_k,W_v,b_v,W_o,b_o}   the attention's (weights.hpp)
//   layers.N.cross_attn.{...}                              decoders only
//   layers.N.ffn.W_1 (d_model, d_ff)  ffn.b_1 (d_ff)        x @ W, as the attention's
//   layers.N.ffn.W_2 (d_ff, d_model)  ffn.b_2 (d_model)
//   layers.N.norm1.{gamma,beta} (d_model)                   norm1, norm2 (encoder);
//                                                           norm1..norm3 (decoder)
//   final_norm.{gamma,beta} (d_model)                       with final_norm
//
// PyTorch state_dicts of nn.TransformerEncoderLayer / DecoderLayer (one
// layer, no "layers.N." prefix) and nn.TransformerEncoder / Decoder convert
// to these names exactly: self_attn and multihead_attn (cross) as
// nn.MultiheadAttention's, linear1/linear2 transposed, normK.weight/bias as
// gamma/beta, the stack's norm.* as final_norm.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mha/config/weight_formats.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/weights.hpp"

namespace mha {

// The arrays of a layer weights file in native names (format auto: told
// apart by the names). Unknown names are errors naming the tensor.
NativeWeights layer_weights_to_native(const std::map<std::string, NpyArray>& arrays,
                                      WeightsFormat format, const std::string& path);

// Native layer arrays in `format` (native or torch; keras is refused): for
// torch, nn.TransformerEncoder/Decoder names (layers.N.self_attn.in_proj_weight,
// multihead_attn, linear1, norm1, ..., norm.* for final_norm), exactly.
std::vector<std::pair<std::string, NpyArray>> layer_weights_from_native(
    const std::map<std::string, NpyArray>& native, WeightsFormat format, const std::string& what);

// Whether the names look like Transformer layer weights of either layout.
bool has_layer_names(const std::map<std::string, NpyArray>& arrays);
bool has_layer_names(const std::vector<std::string>& names);

// How many layers the native names hold (the largest N of layers.N. + 1).
std::size_t layer_count(const std::map<std::string, NpyArray>& native);

// Checks every tensor's presence and shape against `shape` and converts to
// T; errors name the tensor, its shape and the expected one. Tensors the
// stack does not use (a cross_attn in an encoder, layers beyond num_layers)
// are errors too.
template <class T>
StackWeights<T> stack_from_arrays(const std::map<std::string, NpyArray>& native,
                                  const StackShape& shape, const std::string& path);

// Glorot-uniform kernels and zero biases from the streams named as the
// tensors (layers.0.self_attn.W_q, ...), LayerNorm gamma 1 and beta 0.
template <class T>
StackWeights<T> random_stack(const StackShape& shape, std::uint64_t seed, int threads = 0);

// Named arrays for weights.npz, native names.
template <class T>
std::vector<std::pair<std::string, NpyArray>> stack_arrays(const StackWeights<T>& w);

}  // namespace mha
