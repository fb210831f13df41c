// Keras' own weight files (docs/conventions.md, "Keras files"), read into the
// arrays weight_formats.hpp and layer_weights.hpp convert, and written for
// Keras 3's load_weights. Three layouts, as Keras' saving code writes them:
//
//   Keras 3 .weights.h5, and model.weights.h5 inside a .keras zip (beside
//   config.json and metadata.json): keras/src/saving/saving_lib.py
//   (H5IOStore). One group per object, by attribute path from the model
//   ("layers/<class in snake case>[_N]/..."; sublayers by attribute name),
//   each object's own variables as datasets "vars/0", "vars/1", ... in
//   creation order; Keras 3.6 and later put the layer's name on "vars" as
//   attribute "name". A MultiHeadAttention is a group holding query_dense,
//   key_dense, value_dense and output_dense (_query_dense, ... before Keras
//   3.0.3), each EinsumDense's vars/0 the kernel and vars/1 the bias:
//     query_dense/vars/0  (d_model, h, key_dim)   vars/1 (h, key_dim)
//     key_dense/vars/0    (kdim, h, key_dim)      vars/1 (h, key_dim)
//     value_dense/vars/0  (vdim, h, value_dim)    vars/1 (h, value_dim)
//     output_dense/vars/0 (h, value_dim, d_out)   vars/1 (d_out,)
//   An encoder block (the TensorFlow Transformer tutorial's EncoderLayer,
//   keras.io's TransformerBlock) is a group holding mha (or att, keras.io's
//   name) as above, ffn/layers/dense and ffn/layers/dense_1 (the Sequential's
//   two Dense: vars/0 kernel (d_model, d_ff) and (d_ff, d_model), vars/1
//   bias) and layernorm1, layernorm2 (vars/0 gamma, vars/1 beta).
//
//   tf.keras 2 (and Keras 3 legacy) .h5: keras/src/legacy/saving/
//   legacy_h5_format.py, tf.keras's hdf5_format.py: the root (save_weights)
//   or its group "model_weights" (model.save) has attribute layer_names; each
//   layer's group has attribute weight_names and a dataset at each of those
//   names ("mha/query/kernel:0"; Keras 3: "mha/query/kernel"), in the order
//   of layer.weights. A MultiHeadAttention is the weights ending in
//   query/kernel, query/bias, ..., attention_output/bias with one prefix; an
//   encoder block is a layer whose weights are one MultiHeadAttention's, then
//   kernel, bias, kernel, bias (the feed-forward network), gamma, beta, gamma,
//   beta (layernorm1, layernorm2), as tf.keras lists them.
//
// Only these groups and datasets are read; the rest of a file (optimizer
// state, other layers) is walked as the HDF5 reader bounds it and left alone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "mha/io/npy.hpp"

namespace mha {

// What the caller checks on the arrays about to be read, from their headers
// (names as returned, shapes and dtypes as stored), before any is read;
// `names` says how messages name each ("model.keras:layers/mha/query_dense/vars/0").
using KerasCheck = std::function<void(const std::map<std::string, NpyHeaderInfo>& headers,
                                      const std::map<std::string, std::string>& names)>;

// The weights in a Keras file (.h5, .weights.h5, .keras): one
// MultiHeadAttention's in the keras layout of weight_formats.hpp
// (query/kernel, ...), or a stack of encoder blocks in native layer names
// (layers.N.self_attn.W_q, layers.N.ffn.W_1, layers.N.norm1.gamma, ...; N in
// file order). `layer` chooses by name (a group path, its last part, or the
// Keras layer name) when the file holds several; without it the file must
// hold one MultiHeadAttention outside encoder blocks, or encoder blocks only
// (all of them, a stack), else the error lists the names present.
// `max_bytes` caps a .keras's model.weights.h5 (read into memory) and the
// arrays; errors name the file and the dataset.
std::map<std::string, NpyArray> read_keras_weights(const std::string& path,
                                                   const std::optional<std::string>& layer,
                                                   std::optional<std::uint64_t> max_bytes,
                                                   const KerasCheck& check = {});

// The bytes of a Keras 3 .weights.h5 that load_weights reads into a model
// holding one MultiHeadAttention (native attention names W_q, ...; `h` heads)
// or N encoder blocks built as the tutorial's EncoderLayer (native layer
// names; encoders without final_norm): the layout above, with
// "layers/multi_head_attention" or "layers/encoder_layer", "..._1", ....
// Throws (invalid_input) for what the layout cannot hold.
std::string encode_keras_weights(const std::map<std::string, NpyArray>& native,
                                 std::optional<std::size_t> h, const std::string& what);

}  // namespace mha
