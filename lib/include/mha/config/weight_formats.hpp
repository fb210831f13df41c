// Weight layouts of other frameworks, converted to and from the native one
// (see weights.hpp). Conversion is exact: transposes, slices and reshapes of
// the stored values, in their stored dtype.
//
//   torch  nn.MultiheadAttention.state_dict(), saved with numpy.savez:
//          in_proj_weight (3E, E), in_proj_bias (3E)        when kdim = vdim = E
//          q_proj_weight (E, E), k_proj_weight (E, kdim),
//          v_proj_weight (E, vdim), in_proj_bias (3E)        otherwise
//          out_proj.weight (E, E), out_proj.bias (E)
//          Linear stores W transposed: W_q = in_proj_weight[0:E].T. E = h*d_k =
//          h*d_v = d_model = d_out; h is not stored. bias_k/bias_v (add_bias_kv)
//          are refused. Names may carry a module prefix ("encoder.attn.").
//   keras  MultiHeadAttention weights, one array per variable:
//          query/kernel (d_model, h, key_dim), query/bias (h, key_dim), key/...,
//          value/kernel (vdim, h, value_dim), attention_output/kernel
//          (h, value_dim, d_out), attention_output/bias (d_out). '/' or '.'
//          separate the parts; a layer-name prefix and a ":0" suffix are allowed.
//          Keras' own files (.h5, .weights.h5, .keras) are read into these
//          names, or native layer names for encoder blocks, by keras_file.hpp.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mha/io/npy.hpp"

namespace mha {

// preset: a whole-model checkpoint by a model family's own names
// (presets.hpp; the family is named beside the format): read only, one layer
// at a time.
enum class WeightsFormat { auto_detect, native, torch, keras, preset };
const char* to_string(WeightsFormat format);  // "auto", "native", "torch", "keras", "preset"

struct Family;

// Guesses the layout from the tensor names; throws (invalid_input) naming
// `path` when the names fit none.
WeightsFormat detect_weights_format(const std::map<std::string, NpyArray>& arrays,
                                    const std::string& path);

// The checks of to_native that need the tensor names alone, with its
// messages: names that fit no layout (auto), or a name unknown in `format`.
// Presets and Transformer layer files (layer_weights.hpp)
// are checked when converted.
void check_weight_names(const std::vector<std::string>& names, WeightsFormat format,
                        const std::string& path);

struct NativeWeights {
  std::map<std::string, NpyArray> arrays;  // native names: W_q, b_q, ...
  WeightsFormat format;                    // the layout they were read in
  std::optional<std::size_t> h;            // when the layout fixes it (keras)
  const Family* family = nullptr;          // preset: the model family whose names they had
};

// Converts arrays in `format` (auto: detected) to native names and shapes.
// Errors name `path`, the tensor and the expected shape.
// A preset's family is `preset`, or (auto) found by the names.
NativeWeights to_native(const std::map<std::string, NpyArray>& arrays, WeightsFormat format,
                        const std::string& path, const Family* preset = nullptr);

// Converts native arrays to `format` (not auto). `h` is needed for keras.
// Throws (invalid_input) when the layer does not fit the layout (torch needs
// d_model = h*d_k = h*d_v = d_out).
std::vector<std::pair<std::string, NpyArray>> from_native(
    const std::map<std::string, NpyArray>& native, WeightsFormat format,
    std::optional<std::size_t> h, const std::string& what);

// A 2-D array transposed (PyTorch's Linear stores x @ W as W^T).
NpyArray transpose_2d(const NpyArray& a);

// `mha weights convert`: reads `in` (.npz, directory, .safetensors, or a
// Keras .h5/.weights.h5/.keras, its layer chosen by `keras_layer`) in layout
// `from`, writes `out` atomically: NAME.weights.h5 as Keras 3's load_weights
// reads it (keras_file.hpp; `to` is then keras), .safetensors, else .npz in
// layout `to`. Returns the layout read. Throws (invalid_input) before reading
// when `out` is a directory or lies under a file, and before converting when
// a tensor is not float16/32/64.
WeightsFormat convert_weights_file(const std::string& in, WeightsFormat from, WeightsFormat to,
                                   std::optional<std::size_t> h, const std::string& out,
                                   const std::optional<std::string>& keras_layer = std::nullopt);

}  // namespace mha
