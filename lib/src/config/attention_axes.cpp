#include "mha/config/attention_axes.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "mha/base/error.hpp"

namespace mha {
namespace {

using Shape = std::vector<std::size_t>;

std::size_t product(const Shape& shape, const std::vector<std::size_t>& axes) {
  std::size_t n = 1;
  for (auto a : axes) n *= shape[a];
  return n;
}

std::string list_str(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// "(2, 5, *, *, kdim)": the shape a key or value must have, '*' on the
// attention axes (their sizes are the input's own).
std::string expected_str(const Shape& query, const std::vector<bool>& is_attention,
                         const std::string& features) {
  std::string s = "(";
  for (std::size_t i = 0; i + 1 < query.size(); ++i)
    s += (is_attention[i] ? std::string("*") : std::to_string(query[i])) + ", ";
  return s + features + ")";
}

// Keras attends over every axis but the first and last of an N-D query;
// here that takes saying so, rather than a guess about a stray file.
void refuse_nd_query_without_axes(const FileShapes& files) {
  if (!files.query || files.query->size() <= 3) return;
  std::string all;
  for (std::size_t i = 1; i + 1 < files.query->size(); ++i)
    all += (i > 1 ? ", " : "") + std::to_string(i);
  fail_input(files.query_name +
             ": expected a query of shape (B, T, d_model) or (T, d_model), got " +
             shape_str(*files.query) + "; to attend over axes of an N-D query give " +
             "attention_axes ([" + all + "] for all of them, Keras' default)");
}

// The given axes as indices into the query's `rank` axes, each an attention
// axis once: neither the batch axis nor the features.
std::vector<std::size_t> attention_axis_indices(const std::vector<std::int64_t>& given,
                                                std::size_t rank, bool query_file,
                                                const std::string& key,
                                                const std::string& query_where) {
  const auto r = static_cast<std::int64_t>(rank);
  std::vector<std::size_t> axes;
  for (auto a : given) {
    // Keras normalizes axis + rank of the query (its projection keeps the
    // query's leading axes in place).
    const std::int64_t n = a < 0 ? a + r : a;
    const std::string range = "expected axes 1 to " + std::to_string(r - 2) + " (or -" +
                              std::to_string(r - 1) + " to -2) of the " + query_where;
    if (n == 0) fail_input(key + ": axis " + std::to_string(a) + " is the batch axis; " + range);
    if (n == r - 1)
      fail_input(key + ": axis " + std::to_string(a) + " is the feature axis; " + range);
    if (n < 0 || n >= r)
      fail_input(key + ": axis " + std::to_string(a) + " is out of range; " + range +
                 (query_file ? "" : " (query/key/value .npy files of rank > 3 allow more axes)"));
    if (std::find(axes.begin(), axes.end(), static_cast<std::size_t>(n)) != axes.end())
      fail_input(key + ": axis " + std::to_string(n) + " is given twice; " + range);
    axes.push_back(static_cast<std::size_t>(n));
  }
  return axes;
}

// Masks and biases are laid out over (B, T, S); positions are defined along
// one axis only.
void refuse_positional_options(const Config& c, std::size_t rank, std::size_t n_axes,
                               const std::string& key, const std::string& query_where) {
  const std::string nd = " is not supported with attention_axes on inputs of rank " +
                         std::to_string(rank) + " (" + query_where + ")";
  if (c.mask) fail_input("mask" + nd + "; its (B, T, S) layout has no meaning there");
  if (c.key_padding_mask)
    fail_input("key_padding_mask" + nd + "; its (B, S) layout has no meaning there");
  if (c.key_lengths || c.key_lengths_file)
    fail_input("key_lengths" + nd + "; its B lengths have no meaning there");
  if (c.bias) fail_input("bias" + nd + "; its (B, h, T, S) layout has no meaning there");
  if (n_axes > 1) {
    const std::string one = " needs a single attention axis to measure positions along; " + key +
                            " attends over " + std::to_string(n_axes) + " axes at once";
    if (c.causal != Causal::none) fail_input("causal" + one);
    if (c.window) fail_input("window" + one);
    if (c.alibi) fail_input("alibi" + one);
  }
}

// Key and value files: the query's rank, its sizes on the batch axes, and
// the key's shape for the value but for the features.
void check_key_value_shapes(const FileShapes& files, const std::vector<bool>& is_attention,
                            const std::string& key, const std::string& query_where) {
  const Shape& q = *files.query;
  const std::size_t rank = q.size();
  auto check_nonempty = [](const Shape& s, const std::string& path, const char* role) {
    for (auto n : s)
      if (n == 0) fail_input(path + ": " + role + " has an empty dimension, shape " + shape_str(s));
  };
  check_nonempty(q, files.query_name, "query");
  auto check_kv = [&](const Shape& s, const std::string& path, const char* role,
                      const char* features) {
    if (s.size() != rank)
      fail_input(path + ": " + role + " of shape " + shape_str(s) + " has rank " +
                 std::to_string(s.size()) + ", but the " + query_where + " has rank " +
                 std::to_string(rank) + "; with " + key + " expected " +
                 expected_str(q, is_attention, features));
    check_nonempty(s, path, role);
    for (std::size_t i = 0; i + 1 < rank; ++i)
      if (!is_attention[i] && s[i] != q[i])
        fail_input(path + ": " + role + " of shape " + shape_str(s) + " disagrees with the " +
                   query_where + " on axis " + std::to_string(i) + ", a batch axis under " + key +
                   "; expected " + expected_str(q, is_attention, features));
  };
  if (files.key) check_kv(*files.key, files.key_name, "key", "kdim");
  if (files.value) check_kv(*files.value, files.value_name, "value", "vdim");
  if (files.key && files.value)
    for (std::size_t i = 0; i + 1 < rank; ++i)
      if ((*files.key)[i] != (*files.value)[i]) {
        std::string s = "(";
        for (std::size_t k = 0; k + 1 < rank; ++k) s += std::to_string((*files.key)[k]) + ", ";
        fail_input(files.value_name + ": value of shape " + shape_str(*files.value) +
                   " disagrees with key '" + files.key_name + "' of shape " +
                   shape_str(*files.key) + " on axis " + std::to_string(i) +
                   "; the value has the key's shape but for the last axis: expected " + s +
                   "vdim)");
      }
}

}  // namespace

void permute_rows(const void* in, const Shape& shape, const std::vector<std::size_t>& perm,
                  std::size_t itemsize, void* out) {
  const std::size_t rank = shape.size();
  std::vector<bool> seen(rank, false);
  for (auto p : perm)
    if (p < rank && !seen[p]) seen[p] = true;
  if (rank == 0 || perm.size() != rank || perm.back() != rank - 1 ||
      std::find(seen.begin(), seen.end(), false) != seen.end())
    fail_runtime("permute_rows: expected a permutation of the " + std::to_string(rank) +
                 " axes that keeps the last axis last");
  const std::size_t row_bytes = shape.back() * itemsize;
  const std::size_t outer = rank - 1;  // the axes that move; rows stay whole
  // Output axis i has size[i] and advances the input by in_stride[i] rows.
  std::vector<std::size_t> stride(outer), in_stride(outer), size(outer);
  std::size_t rows = 1;
  for (std::size_t k = outer; k-- > 0;) stride[k] = rows, rows *= shape[k];
  for (std::size_t i = 0; i < outer; ++i) in_stride[i] = stride[perm[i]], size[i] = shape[perm[i]];
  if (rows == 0 || row_bytes == 0) return;
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  // Output rows in order; `from` follows the input row under an odometer.
  std::vector<std::size_t> index(outer, 0);
  std::size_t from = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    std::memcpy(dst + row * row_bytes, src + from * row_bytes, row_bytes);
    for (std::size_t k = outer; k-- > 0;) {
      from += in_stride[k];
      if (++index[k] < size[k]) break;
      from -= size[k] * in_stride[k];
      index[k] = 0;
    }
  }
}

AttentionAxes::AttentionAxes(std::vector<std::size_t> axes, std::vector<std::size_t> perm,
                             Shape query_nd, Shape kv_nd)
    : axes_(std::move(axes)),
      perm_(std::move(perm)),
      query_nd_(std::move(query_nd)),
      kv_nd_(std::move(kv_nd)) {}

Shape AttentionAxes::query_shape(std::size_t features) const {
  Shape s = query_nd_;
  if (!s.empty()) s.back() = features;
  return s;
}

Shape AttentionAxes::key_shape(std::size_t features) const {
  Shape s = kv_nd_;
  if (!s.empty()) s.back() = features;
  return s;
}

Shape AttentionAxes::attention_shape(const Dims& d, bool mean) const {
  if (!active()) return mean ? Shape{d.B, d.T, d.S} : Shape{d.B, d.h, d.T, d.S};
  // perm_ = (batch axes..., attention axes..., last): Keras' scores are
  // (batch axes..., h, query's attention axes..., key's attention axes...).
  Shape s;
  const std::size_t n_batch = perm_.size() - 1 - axes_.size();
  for (std::size_t i = 0; i < n_batch; ++i) s.push_back(query_nd_[perm_[i]]);
  if (!mean) s.push_back(d.h);
  for (auto a : axes_) s.push_back(query_nd_[a]);
  for (auto a : axes_) s.push_back(kv_nd_[a]);
  return s;
}

NpyArray AttentionAxes::gather(NpyArray x) const {
  if (!active()) return x;
  if (x.shape.size() != perm_.size())
    fail_runtime("attention_axes: gather of an array of shape " + shape_str(x.shape) +
                 " planned for rank " + std::to_string(perm_.size()));
  const Shape nd = x.shape;
  const std::size_t n_batch = perm_.size() - 1 - axes_.size();
  const Shape batch_axes(perm_.begin(), perm_.begin() + static_cast<std::ptrdiff_t>(n_batch));
  const Shape flat = {product(nd, batch_axes), product(nd, axes_), nd.back()};
  std::vector<std::size_t> identity(perm_.size());
  std::iota(identity.begin(), identity.end(), 0);
  // With the attention axes already just before the features, a reshape is all.
  if (perm_ != identity) {
    std::vector<unsigned char> moved(x.data.size());
    permute_rows(x.data.data(), nd, perm_, itemsize(x.dtype), moved.data());
    x.data = std::move(moved);
  }
  x.shape = flat;
  return x;
}

template <class T>
void AttentionAxes::scatter(const T* flat, const Shape& nd, T* out) const {
  std::size_t n = 1;
  for (auto s : nd) n *= s;
  if (!active()) return void(std::copy(flat, flat + n, out));
  // flat is the C-order array of shape nd[perm] (reshaped); its transpose by
  // the inverse permutation is nd.
  Shape permuted(nd.size()), inverse(nd.size());
  for (std::size_t i = 0; i < nd.size(); ++i) permuted[i] = nd[perm_[i]], inverse[perm_[i]] = i;
  permute_rows(flat, permuted, inverse, sizeof(T), out);
}

template void AttentionAxes::scatter<float>(const float*, const Shape&, float*) const;
template void AttentionAxes::scatter<double>(const double*, const Shape&, double*) const;

std::string AttentionAxes::label(const std::string& path) const {
  return active() ? path + " (as flattened by attention_axes)" : path;
}

AttentionAxes plan_attention_axes(const Config& c, FileShapes& files) {
  if (!c.attention_axes) {
    refuse_nd_query_without_axes(files);
    return {};
  }
  const auto& given = *c.attention_axes;
  const std::string key = "attention_axes " + list_str(given);
  // Random inputs are (batch, seq_len, d_model).
  const std::size_t rank = files.query ? files.query->size() : 3;
  const std::string query_where =
      files.query ? "query '" + files.query_name + "' of shape " + shape_str(*files.query)
                  : "random query of shape (batch, seq_len, d_model)";
  if (rank < 3)
    fail_input(key + ": needs a query of rank 3 or more (batch first, features last); " +
               query_where);
  const std::vector<std::size_t> axes =
      attention_axis_indices(given, rank, files.query.has_value(), key, query_where);
  if (rank == 3) return {};  // attention over axis 1: the plain run
  refuse_positional_options(c, rank, axes.size(), key, query_where);

  std::vector<bool> is_attention(rank, false);
  for (auto a : axes) is_attention[a] = true;
  std::vector<std::size_t> perm;
  for (std::size_t i = 0; i + 1 < rank; ++i)
    if (!is_attention[i]) perm.push_back(i);
  const std::size_t n_batch = perm.size();
  perm.insert(perm.end(), axes.begin(), axes.end());
  perm.push_back(rank - 1);
  check_key_value_shapes(files, is_attention, key, query_where);

  const Shape& q = *files.query;
  const Shape kv = files.key ? *files.key : files.value ? *files.value : q;
  AttentionAxes plan(axes, perm, q, kv);
  const Shape batch_axes(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(n_batch));
  auto flat = [&](std::optional<Shape>& s, std::string& name) {
    if (!s) return;
    s = Shape{product(*s, batch_axes), product(*s, axes), s->back()};
    name = plan.label(name);
  };
  flat(files.query, files.query_name);
  flat(files.key, files.key_name);
  flat(files.value, files.value_name);
  return plan;
}

}  // namespace mha
