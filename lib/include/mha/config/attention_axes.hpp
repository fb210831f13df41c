// Keras' attention_axes: attention over chosen axes of N-D inputs, as a
// layout transform around the (B, T, d) kernel. Every axis that is neither
// the batch axis 0, an attention axis nor the feature axis (the last) acts as
// another batch axis:
//
//   query (B, 5, 3, 4, 16), key/value (B, 5, 6, 7, kdim), attention_axes [2, 3]
//   -> query (B*5, 3*4, 16), key/value (B*5, 6*7, kdim)      gather: transpose + reshape
//   -> output (B*5, 12, d_out) -> (B, 5, 3, 4, d_out)         scatter: the inverse
//      attention (B*5, h, 12, 42) = (B, 5, h, 3, 4, 6, 7)     Keras' layout, a reshape
//
// As Keras (_build_attention_equation) does, the batch axes keep their order
// and the attention axes come in the order given, for the query's and the
// key's axes of the scores alike; negative axes count from the query's end.
//
//   mha::FileShapes shapes = ...;                     // the files' N-D shapes
//   mha::AttentionAxes axes = mha::plan_attention_axes(config, shapes);
//   // shapes now hold the (B', L, F) shapes that resolve_dims expects
//   query = axes.gather(std::move(query));            // each input file
//   axes.scatter(output.data(), axes.query_shape(d_out), output_nd.data());
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/io/npy.hpp"

namespace mha {

class AttentionAxes {
 public:
  // No transform: the run's tensors are (B, T, d) as they are.
  AttentionAxes() = default;
  // Inputs of rank perm.size() with the axes moved by `perm` (a permutation
  // that keeps the last axis last); query_nd and kv_nd are the N-D shapes of
  // the query and of the key (or value: they differ only in the last axis).
  AttentionAxes(std::vector<std::size_t> axes, std::vector<std::size_t> perm,
                std::vector<std::size_t> query_nd, std::vector<std::size_t> kv_nd);

  // Whether the inputs are transformed at all (rank > 3). Rank-3 inputs with
  // attention_axes [1] (or [-2]) are exactly the plain run.
  bool active() const { return !perm_.empty(); }
  const std::vector<std::size_t>& axes() const { return axes_; }  // normalized, as given
  const std::vector<std::size_t>& perm() const { return perm_; }  // batch axes, axes, last

  // The N-D shapes of the query and the key/value with `features` last.
  std::vector<std::size_t> query_shape(std::size_t features) const;
  std::vector<std::size_t> key_shape(std::size_t features) const;
  // attention.npy: (B, h, T, S), or (B, T, S) with mean over heads, when not
  // active; else Keras' (B, non-attention..., h, query axes..., key axes...),
  // without h for the mean. The kernel's (B', h, T, S) is a reshape of it.
  std::vector<std::size_t> attention_shape(const Dims& d, bool mean) const;

  // An N-D input (the query, key or value file) as (B', L, F), any dtype.
  // Unchanged when not active.
  NpyArray gather(NpyArray x) const;
  // `path` for messages about a flattened input: "q.npy (as flattened by
  // attention_axes)" when active, else `path`.
  std::string label(const std::string& path) const;
  // A C-order (B', L, F) tensor to its N-D layout `nd` (query_shape(F) or
  // key_shape(F)); `out` holds product(nd) elements.
  template <class T>
  void scatter(const T* flat, const std::vector<std::size_t>& nd, T* out) const;

 private:
  std::vector<std::size_t> axes_, perm_;
  std::vector<std::size_t> query_nd_, kv_nd_;
};

// Checks config.attention_axes against the files' shapes and, when the inputs
// are N-D, rewrites `files` to the (B', L, F) shapes of the flattened inputs
// (resolve_dims then sees an ordinary run). Without attention_axes, or with
// rank-3 inputs and attention_axes [1], nothing changes. Throws mha::Error
// (invalid_input) naming the key, the file and the expected shape when an axis
// is out of range, repeated, the batch or feature axis; when key or value
// disagree with the query in rank or on a non-attention axis; when no query
// file gives N-D shapes; and for the masks and biases that are not defined
// on the flattened axes.
AttentionAxes plan_attention_axes(const Config& config, FileShapes& files);

// out = np.transpose(in, perm) for a C-order array of `shape` with items of
// `itemsize` bytes, where perm keeps the last axis last: each row (the last
// axis) is copied whole.
void permute_rows(const void* in, const std::vector<std::size_t>& shape,
                  const std::vector<std::size_t>& perm, std::size_t itemsize, void* out);

}  // namespace mha
