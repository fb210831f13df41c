// The projection weights of one multi-head attention layer (Weights<T>, in
// the native layout of kernel/weights.hpp) from files and arrays, drawn at
// random, and as named arrays to write.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mha/config/weight_formats.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/dims.hpp"
#include "mha/kernel/weights.hpp"

namespace mha {

// The native tensor names, in file order.
const std::vector<std::string>& weight_names(bool use_bias);

// What read_weight_arrays checks on a file's names and .npy headers before
// it reads any array data.
struct WeightsCheck {
  // The layout the names must fit (check_weight_names); unset: none here,
  // the names are checked when converted (weight_formats.hpp).
  std::optional<WeightsFormat> names;
  // The most bytes the arrays may hold together: the run's max_memory.
  std::optional<std::uint64_t> max_bytes;
  // The sizes the config or the input files give (0: not given), checked
  // against the native arrays' headers (W_q's rows d_model, W_k's kdim, W_v's
  // vdim, W_o's columns d_out; matrices 2-D, biases 1-D), so that an array of
  // a valid name but a shape no such layer has is refused before it is
  // inflated. Each *_from says where its size comes from ("query 'q.npy' of
  // shape (2, 4, 8)"); empty: the config.
  std::size_t d_model = 0, kdim = 0, vdim = 0, d_out = 0;
  std::string d_model_from, kdim_from, vdim_from, d_out_from;
  // The layer to take from a Keras file (.h5, .weights.h5, .keras) holding
  // several (keras_file.hpp); refused for other files.
  std::optional<std::string> keras_layer;
};

// Reads the arrays of a weights file: an .npz archive, a directory of
// NAME.npy, a .safetensors file, or a Keras file (.h5, .weights.h5, .keras:
// keras_file.hpp, which names the arrays in the keras layout, or native layer
// names for encoder blocks). Every member's (or file's, or dataset's) header
// is read and `check`ed first, so that a file of the wrong names or too
// large is refused before anything is inflated or read.
std::map<std::string, NpyArray> read_weight_arrays(const std::string& path,
                                                   const WeightsCheck& check = {});

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
