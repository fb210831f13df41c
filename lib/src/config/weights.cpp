#include "mha/config/weights.hpp"

#include <algorithm>
#include <filesystem>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/config/keras_file.hpp"
#include "mha/config/memory.hpp"
#include "mha/config/rng.hpp"
#include "mha/io/file_kind.hpp"
#include "mha/io/npz.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/io/safetensors.hpp"

namespace mha {
namespace fs = std::filesystem;

const std::vector<std::string>& weight_names(bool use_bias) {
  static const std::vector<std::string> with_bias = {"W_q", "b_q", "W_k", "b_k",
                                                     "W_v", "b_v", "W_o", "b_o"};
  static const std::vector<std::string> without_bias = {"W_q", "W_k", "W_v", "W_o"};
  return use_bias ? with_bias : without_bias;
}

namespace {

template <class T, std::size_t N>
Tensor<T, N> take(const std::map<std::string, NpyArray>& arrays, const std::string& name,
                  const TensorShape<N>& expected, const std::string& meaning,
                  const std::string& path) {
  auto it = arrays.find(name);
  if (it == arrays.end()) fail_input(path + ": missing weight tensor '" + name + "'");
  const NpyArray& a = it->second;
  std::vector<std::size_t> want(expected.begin(), expected.end());
  if (a.shape != want)
    fail_input(path + ": " + name + " has shape " + shape_str(a.shape) + ", expected " +
               shape_str(want) + " = " + meaning);
  Tensor<T, N> t(expected);
  convert(a, t.data(), path + ":" + name);
  return t;
}

}  // namespace

namespace {

// A weight with an empty dimension (W_q of shape (0, 8) would make d_model 0,
// which no layer has), refused by name before anything is read.
void refuse_empty(const std::string& name, const std::vector<std::size_t>& shape) {
  if (std::find(shape.begin(), shape.end(), std::size_t{0}) != shape.end())
    fail_input(name + ": shape " + shape_str(shape) +
               "; expected weights without an empty dimension");
}

// The native arrays' ranks, and the sizes the config gives, from their headers
// (WeightsCheck::d_model ...). The plan checks the rest once the arrays are read.
void check_native_headers(const std::map<std::string, NpyHeaderInfo>& headers,
                          const std::map<std::string, std::string>& names,
                          const WeightsCheck& check) {
  struct Matrix {
    const char* name;
    const char* meaning;
    const char* size;         // the config key of the axis `given` fixes
    std::size_t given;        // 0: not given
    const std::string& from;  // where `given` comes from; empty: the config
    int axis;
  };
  const Matrix matrices[] = {
      {"W_q", "(d_model, h*d_k)", "d_model", check.d_model, check.d_model_from, 0},
      {"W_k", "(kdim, h*d_k)", "kdim", check.kdim, check.kdim_from, 0},
      {"W_v", "(vdim, h*d_v)", "vdim", check.vdim, check.vdim_from, 0},
      {"W_o", "(h*d_v, d_out)", "d_out", check.d_out, check.d_out_from, 1}};
  for (const Matrix& m : matrices) {
    const auto it = headers.find(m.name);
    if (it == headers.end()) continue;
    const std::vector<std::size_t>& s = it->second.shape;
    if (s.size() != 2)
      fail_input(names.at(m.name) + ": shape " + shape_str(s) + "; expected a matrix " + m.meaning);
    const std::string given = std::string(m.size) + " = " + std::to_string(m.given);
    if (m.given && s[m.axis] != m.given)  // the plan's wording for the same mismatch
      fail_input(std::string(m.size) + " mismatch: " +
                 (m.from.empty() ? given + " in the config" : m.from + " implies " + given) +
                 ", but " + names.at(m.name) + " of shape " + shape_str(s) + " " + m.meaning +
                 " implies " + m.size + " = " + std::to_string(s[m.axis]));
  }
  for (const char* b : {"b_q", "b_k", "b_v", "b_o"}) {
    const auto it = headers.find(b);
    if (it != headers.end() && it->second.shape.size() != 1)
      fail_input(names.at(b) + ": shape " + shape_str(it->second.shape) + "; expected a vector");
  }
}

// `check` on the headers of a weights file's arrays, named by `names`
// ("weights.npz:W_q"): before any data is read.
void check_headers(const std::string& path, const std::map<std::string, NpyHeaderInfo>& headers,
                   const std::map<std::string, std::string>& names, const WeightsCheck& check) {
  for (const auto& [key, header] : headers) refuse_empty(names.at(key), header.shape);
  check_native_headers(headers, names, check);
  if (check.names) {
    std::vector<std::string> keys;
    for (const auto& [key, header] : headers) keys.push_back(key);
    check_weight_names(keys, *check.names, path);
  }
  if (!check.max_bytes) return;
  std::uint64_t total = 0;
  const std::string* largest = nullptr;
  for (const auto& [key, header] : headers) {
    total += header.data_bytes;
    if (!largest || header.data_bytes > headers.at(*largest).data_bytes) largest = &key;
  }
  if (total <= *check.max_bytes) return;
  const NpyHeaderInfo& h = headers.at(*largest);
  fail_input(names.at(*largest) + ": " + dtype_name(h.dtype) + " array of shape " +
             shape_str(h.shape) + " (" + format_bytes(static_cast<double>(h.data_bytes)) +
             "); the weights' arrays hold " + format_bytes(static_cast<double>(total)) +
             " in all, over max_memory " + format_bytes(static_cast<double>(*check.max_bytes)) +
             " (raise max_memory)");
}

}  // namespace

std::map<std::string, NpyArray> read_weight_arrays(const std::string& path,
                                                   const WeightsCheck& check) {
  if (const auto* given = provided_weights(path)) return *given;
  const FileKind kind = file_kind(path);
  if (kind == FileKind::hdf5 || kind == FileKind::keras)
    return read_keras_weights(path, check.keras_layer, check.max_bytes,
                              [&](const std::map<std::string, NpyHeaderInfo>& headers,
                                  const std::map<std::string, std::string>& names) {
                                check_headers(path, headers, names, check);
                              });
  if (check.keras_layer)
    fail_input(path + ": keras_layer " + echo(*check.keras_layer) +
               " applies to Keras weights files (.h5, .weights.h5, .keras) only");
  if (kind == FileKind::safetensors) {
    std::map<std::string, NpyArray> arrays = read_safetensors(path);
    for (const auto& [name, a] : arrays) refuse_empty(path + ":" + name, a.shape);
    return arrays;
  }
  // A .npy is not a weights file: read_npz says why.
  if (kind != FileKind::npy_directory)
    return read_npz(path, [&](const std::string&, const std::vector<NpzMember>& members) {
      std::map<std::string, NpyHeaderInfo> headers;
      std::map<std::string, std::string> names;
      for (const NpzMember& m : members) {
        headers[m.key] = m.header;
        names[m.key] = m.name;
      }
      check_headers(path, headers, names, check);
    });
  std::error_code ec;
  std::map<std::string, std::string> files;  // name -> its .npy
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (kind_from_name(entry.path().string()) == FileKind::npy)
      files[entry.path().stem().string()] = entry.path().string();
  if (ec) fail_input(path + ": cannot list weights directory: " + ec.message());
  if (files.empty()) fail_input(path + ": weights directory holds no .npy files");
  std::map<std::string, NpyHeaderInfo> headers;
  for (const auto& [key, file] : files) headers[key] = read_npy_header(file);
  check_headers(path, headers, files, check);
  std::map<std::string, NpyArray> arrays;
  for (const auto& [key, file] : files) arrays[key] = read_npy(file);
  return arrays;
}

template <class T>
Weights<T> weights_from_arrays(const std::map<std::string, NpyArray>& arrays, const Dims& d,
                               bool use_bias, const std::string& path, const std::string& prefix) {
  if (!use_bias) {
    for (const char* b : {"b_q", "b_k", "b_v", "b_o"})
      if (arrays.count(prefix + b))
        fail_input(path + ": holds bias '" + prefix + b + "' but use_bias is false");
  } else {
    for (const char* b : {"b_q", "b_k", "b_v", "b_o"})
      if (!arrays.count(prefix + b))
        fail_input(path + ": missing bias '" + prefix + b +
                   "' (use_bias is true; set use_bias to false for bias-free projections)");
  }
  Weights<T> w;
  const std::size_t hdk = d.h * d.d_k, hdv = d.h * d.d_v;
  // Grouped-query attention: kv_heads key/value heads instead of h.
  const std::size_t kdk = d.kv() * d.d_k, kdv = d.kv() * d.d_v;
  const std::string kv = d.kv() == d.h ? "h" : "kv_heads";
  w.W_q = take<T, 2>(arrays, prefix + "W_q", {d.d_model, hdk}, "(d_model, h*d_k)", path);
  w.W_k = take<T, 2>(arrays, prefix + "W_k", {d.kdim, kdk}, "(kdim, " + kv + "*d_k)", path);
  w.W_v = take<T, 2>(arrays, prefix + "W_v", {d.vdim, kdv}, "(vdim, " + kv + "*d_v)", path);
  w.W_o = take<T, 2>(arrays, prefix + "W_o", {hdv, d.d_out}, "(h*d_v, d_out)", path);
  if (use_bias) {
    w.b_q = take<T, 1>(arrays, prefix + "b_q", {hdk}, "(h*d_k,)", path);
    w.b_k = take<T, 1>(arrays, prefix + "b_k", {kdk}, "(" + kv + "*d_k,)", path);
    w.b_v = take<T, 1>(arrays, prefix + "b_v", {kdv}, "(" + kv + "*d_v,)", path);
    w.b_o = take<T, 1>(arrays, prefix + "b_o", {d.d_out}, "(d_out,)", path);
  }
  if (arrays.count(prefix + "q_norm") || arrays.count(prefix + "k_norm")) {  // both or neither
    w.q_norm = take<T, 1>(arrays, prefix + "q_norm", {d.d_k}, "(d_k,)", path);
    w.k_norm = take<T, 1>(arrays, prefix + "k_norm", {d.d_k}, "(d_k,)", path);
  }
  return w;
}

template <class T>
Weights<T> random_weights(const Dims& d, bool use_bias, std::uint64_t seed, int threads,
                          const std::string& prefix) {
  auto kernel = [&](const char* name, std::size_t rows, std::size_t cols) {
    Tensor<T, 2> k({rows, cols});
    const T limit = static_cast<T>(glorot_limit(rows, cols));
    RandomStream(seed, prefix + name).fill_uniform<T>(k.data(), k.size(), -limit, limit, threads);
    return k;
  };
  const std::size_t hdk = d.h * d.d_k, hdv = d.h * d.d_v;
  const std::size_t kdk = d.kv() * d.d_k, kdv = d.kv() * d.d_v;
  Weights<T> w;
  w.W_q = kernel("W_q", d.d_model, hdk);
  w.W_k = kernel("W_k", d.kdim, kdk);
  w.W_v = kernel("W_v", d.vdim, kdv);
  w.W_o = kernel("W_o", hdv, d.d_out);
  if (use_bias) {
    w.b_q = Tensor<T, 1>::full({hdk}, 0);
    w.b_k = Tensor<T, 1>::full({kdk}, 0);
    w.b_v = Tensor<T, 1>::full({kdv}, 0);
    w.b_o = Tensor<T, 1>::full({d.d_out}, 0);
  }
  return w;
}

template <class T>
std::vector<std::pair<std::string, NpyArray>> weight_arrays(const Weights<T>& w,
                                                            const std::string& prefix) {
  std::vector<std::pair<std::string, NpyArray>> out;
  auto add = [&](const char* name, const auto& t) {
    std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
    out.emplace_back(prefix + name, NpyArray::of(t.data(), shape));
  };
  add("W_q", w.W_q);
  if (w.has_bias()) add("b_q", w.b_q);
  add("W_k", w.W_k);
  if (w.has_bias()) add("b_k", w.b_k);
  add("W_v", w.W_v);
  if (w.has_bias()) add("b_v", w.b_v);
  add("W_o", w.W_o);
  if (w.has_bias()) add("b_o", w.b_o);
  if (w.q_norm.size()) add("q_norm", w.q_norm), add("k_norm", w.k_norm);
  return out;
}

#define MHA_INSTANTIATE(T)                                                                        \
  template Weights<T> weights_from_arrays<T>(const std::map<std::string, NpyArray>&, const Dims&, \
                                             bool, const std::string&, const std::string&);       \
  template Weights<T> random_weights<T>(const Dims&, bool, std::uint64_t, int,                    \
                                        const std::string&);                                      \
  template std::vector<std::pair<std::string, NpyArray>> weight_arrays<T>(const Weights<T>&,      \
                                                                          const std::string&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
