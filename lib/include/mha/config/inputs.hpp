// The query, key and value inputs of a run: read from .npy files (2-D files
// mean B = 1) and converted to the compute type, or drawn uniform on [0, 1)
// from the streams "query", "key", "value" of the seed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mha/base/tensor.hpp"
#include "mha/config/dims.hpp"
#include "mha/io/npy.hpp"

namespace mha {

template <class T>
struct Inputs {
  Tensor<T, 3> query;  // (B, T, d_model)
  Tensor<T, 3> key;    // (B, S, kdim); empty when dims.key_is_query
  Tensor<T, 3> value;  // (B, S, vdim); empty when dims.value_is_key
  // Borrowed instead: a caller's buffer of the compute type in C order
  // (mha/io/provided_input.hpp's views), used in place without a copy; the
  // tensor above is then empty.
  const T *query_view = nullptr, *key_view = nullptr, *value_view = nullptr;

  const T* query_data() const { return query_view ? query_view : query.data(); }
  const T* key_data(const Dims& d) const {
    return d.key_is_query ? query_data() : key_view ? key_view : key.data();
  }
  const T* value_data(const Dims& d) const {
    return d.value_is_key ? key_data(d) : value_view ? value_view : value.data();
  }
};

// One input tensor of shape (B, L, F): converted from `file` if given (its
// shape was checked by resolve_dims), else random from stream `name`
// (generated on `threads` threads, 0: default_threads()).
template <class T>
Tensor<T, 3> make_input(const std::optional<NpyArray>& file, const std::string& path,
                        const std::string& name, std::size_t B, std::size_t L, std::size_t F,
                        std::uint64_t seed, int threads = 0);

}  // namespace mha
