#include "mha/config/weight_formats.hpp"

#include <algorithm>
#include <cstring>

#include <filesystem>

#include "mha/base/error.hpp"
#include "mha/config/keras_file.hpp"
#include "mha/config/layer_weights.hpp"
#include "mha/config/presets.hpp"
#include "mha/config/weights.hpp"
#include "mha/io/file_kind.hpp"
#include "mha/io/output_set.hpp"
#include "mha/io/safetensors.hpp"

namespace mha {
namespace {

using Arrays = std::map<std::string, NpyArray>;
using Shape = std::vector<std::size_t>;

const char* const kTorchNames[] = {"in_proj_weight", "in_proj_bias",  "q_proj_weight",
                                   "k_proj_weight",  "v_proj_weight", "out_proj.weight",
                                   "out_proj.bias",  "bias_k",        "bias_v"};
const char* const kKerasNames[] = {"query/kernel",
                                   "query/bias",
                                   "key/kernel",
                                   "key/bias",
                                   "value/kernel",
                                   "value/bias",
                                   "attention_output/kernel",
                                   "attention_output/bias"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "encoder.attn.in_proj_weight" -> "in_proj_weight"; "" if not a torch name.
std::string torch_name(const std::string& name) {
  for (const char* n : kTorchNames)
    if (name == n || ends_with(name, std::string(".") + n)) return n;
  return "";
}

// "mha/query/kernel:0", "layer.query.kernel" -> "query/kernel"; "" if none.
std::string keras_name(std::string name) {
  if (ends_with(name, ":0")) name.resize(name.size() - 2);
  std::replace(name.begin(), name.end(), '.', '/');
  for (const char* n : kKerasNames)
    if (name == n || ends_with(name, std::string("/") + n)) return n;
  return "";
}

bool is_native_name(const std::string& name) {
  if (name == "q_norm" || name == "k_norm") return true;  // QK-norm (weights.hpp)
  const auto& known = weight_names(true);
  return std::find(known.begin(), known.end(), name) != known.end();
}

NpyArray reshaped(NpyArray a, Shape shape) {
  a.shape = std::move(shape);
  return a;
}

// Rows [r0, r1) of a 2-D array, or elements [r0, r1) of a 1-D one.
NpyArray rows(const NpyArray& a, std::size_t r0, std::size_t r1) {
  const std::size_t row_bytes = a.size() / a.shape[0] * itemsize(a.dtype);
  NpyArray out;
  out.dtype = a.dtype;
  out.shape = a.shape;
  out.shape[0] = r1 - r0;
  out.data.assign(a.data.begin() + r0 * row_bytes, a.data.begin() + r1 * row_bytes);
  return out;
}

// Parts stored in different float dtypes (say W_q in float16, W_k in
// float32) are widened to the widest of them, which holds each exactly.
NpyArray concat_rows(const std::vector<const NpyArray*>& parts) {
  NpyArray out;
  out.dtype = parts[0]->dtype;
  for (const NpyArray* p : parts)
    if (itemsize(p->dtype) > itemsize(out.dtype)) out.dtype = p->dtype;
  out.shape = parts[0]->shape;
  out.shape[0] = 0;
  for (const NpyArray* p : parts) {
    out.shape[0] += p->shape[0];
    if (p->dtype == out.dtype) {
      out.data.insert(out.data.end(), p->data.begin(), p->data.end());
      continue;
    }
    const std::size_t at = out.data.size();
    out.data.resize(at + p->size() * itemsize(out.dtype));
    if (out.dtype == DType::f8)
      convert(*p, reinterpret_cast<double*>(out.data.data() + at), "in_proj");
    else
      convert(*p, reinterpret_cast<float*>(out.data.data() + at), "in_proj");
  }
  return out;
}

// (r, c) -> (c, r), element by element in the stored dtype.
NpyArray transposed(const NpyArray& a) {
  const std::size_t r = a.shape[0], c = a.shape[1], w = itemsize(a.dtype);
  NpyArray out;
  out.dtype = a.dtype;
  out.shape = {c, r};
  out.data.resize(a.data.size());
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j)
      std::memcpy(&out.data[(j * r + i) * w], &a.data[(i * c + j) * w], w);
  return out;
}

const NpyArray& need(const Arrays& a, const std::string& name, std::size_t rank,
                     const std::string& path, const char* meaning) {
  auto it = a.find(name);
  if (it == a.end()) fail_input(path + ": missing tensor '" + name + "' " + meaning);
  if (it->second.shape.size() != rank)
    fail_input(path + ": " + name + " has shape " + shape_str(it->second.shape) + ", expected " +
               meaning);
  return it->second;
}

void expect_shape(const NpyArray& a, const Shape& expected, const std::string& path,
                  const std::string& name, const char* meaning) {
  if (a.shape != expected)
    fail_input(path + ": " + name + " has shape " + shape_str(a.shape) + ", expected " +
               shape_str(expected) + " = " + meaning);
}

NativeWeights torch_to_native(const Arrays& in, const std::string& path) {
  Arrays a;
  for (const auto& [name, array] : in) {
    std::string n = torch_name(name);
    if (n.empty())
      fail_input(path + ": unknown tensor '" + name +
                 "' in a PyTorch nn.MultiheadAttention state_dict");
    if (n == "bias_k" || n == "bias_v")
      fail_input(
          path + ": holds '" + name +
          "' (nn.MultiheadAttention with add_bias_kv=True), which this tool does not support");
    if (!a.emplace(n, array).second) fail_input(path + ": two tensors named '" + n + "'");
  }
  NativeWeights out;
  out.format = WeightsFormat::torch;
  const NpyArray& W_out = need(a, "out_proj.weight", 2, path, "(E, E)");
  const std::size_t E = W_out.shape[0];
  expect_shape(W_out, {E, E}, path, "out_proj.weight", "(E, E)");
  out.arrays["W_o"] = transposed(W_out);
  if (a.count("in_proj_weight")) {
    const NpyArray& w = need(a, "in_proj_weight", 2, path, "(3E, E)");
    expect_shape(w, {3 * E, E}, path, "in_proj_weight", "(3E, E) with E from out_proj.weight");
    out.arrays["W_q"] = transposed(rows(w, 0, E));
    out.arrays["W_k"] = transposed(rows(w, E, 2 * E));
    out.arrays["W_v"] = transposed(rows(w, 2 * E, 3 * E));
  } else {
    const NpyArray& q = need(a, "q_proj_weight", 2, path, "(E, E) (or in_proj_weight)");
    const NpyArray& k = need(a, "k_proj_weight", 2, path, "(E, kdim)");
    const NpyArray& v = need(a, "v_proj_weight", 2, path, "(E, vdim)");
    expect_shape(q, {E, E}, path, "q_proj_weight", "(E, E)");
    expect_shape(k, {E, k.shape[1]}, path, "k_proj_weight", "(E, kdim)");
    expect_shape(v, {E, v.shape[1]}, path, "v_proj_weight", "(E, vdim)");
    out.arrays["W_q"] = transposed(q);
    out.arrays["W_k"] = transposed(k);
    out.arrays["W_v"] = transposed(v);
  }
  const bool has_in_bias = a.count("in_proj_bias"), has_out_bias = a.count("out_proj.bias");
  if (has_in_bias != has_out_bias)
    fail_input(path + ": holds " +
               (has_in_bias ? "in_proj_bias but not out_proj.bias"
                            : "out_proj.bias but not in_proj_bias") +
               "; expected both (bias=True) or neither (bias=False)");
  if (has_in_bias) {
    const NpyArray& b = need(a, "in_proj_bias", 1, path, "(3E,)");
    expect_shape(b, {3 * E}, path, "in_proj_bias", "(3E,)");
    const NpyArray& bo = need(a, "out_proj.bias", 1, path, "(E,)");
    expect_shape(bo, {E}, path, "out_proj.bias", "(E,)");
    out.arrays["b_q"] = rows(b, 0, E);
    out.arrays["b_k"] = rows(b, E, 2 * E);
    out.arrays["b_v"] = rows(b, 2 * E, 3 * E);
    out.arrays["b_o"] = bo;
  }
  return out;
}

NativeWeights keras_to_native(const Arrays& in, const std::string& path) {
  Arrays a;
  for (const auto& [name, array] : in) {
    std::string n = keras_name(name);
    if (n.empty())
      fail_input(path + ": unknown tensor '" + name + "' in Keras MultiHeadAttention weights");
    if (!a.emplace(n, array).second) fail_input(path + ": two tensors named '" + n + "'");
  }
  NativeWeights out;
  out.format = WeightsFormat::keras;
  const NpyArray& q = need(a, "query/kernel", 3, path, "(d_model, h, key_dim)");
  const NpyArray& k = need(a, "key/kernel", 3, path, "(kdim, h, key_dim)");
  const NpyArray& v = need(a, "value/kernel", 3, path, "(vdim, h, value_dim)");
  const NpyArray& o = need(a, "attention_output/kernel", 3, path, "(h, value_dim, d_out)");
  const std::size_t h = q.shape[1], d_k = q.shape[2], d_v = v.shape[2];
  expect_shape(k, {k.shape[0], h, d_k}, path, "key/kernel",
               "(kdim, h, key_dim) with h, key_dim from query/kernel");
  expect_shape(o, {h, d_v, o.shape[2]}, path, "attention_output/kernel",
               "(h, value_dim, d_out) with h from query/kernel, value_dim from value/kernel");
  expect_shape(v, {v.shape[0], h, d_v}, path, "value/kernel",
               "(vdim, h, value_dim) with h from query/kernel");
  out.h = h;
  out.arrays["W_q"] = reshaped(q, {q.shape[0], h * d_k});
  out.arrays["W_k"] = reshaped(k, {k.shape[0], h * d_k});
  out.arrays["W_v"] = reshaped(v, {v.shape[0], h * d_v});
  out.arrays["W_o"] = reshaped(o, {h * d_v, o.shape[2]});
  const char* biases[][3] = {{"query/bias", "b_q", "(h, key_dim)"},
                             {"key/bias", "b_k", "(h, key_dim)"},
                             {"value/bias", "b_v", "(h, value_dim)"},
                             {"attention_output/bias", "b_o", "(d_out,)"}};
  std::size_t found = 0;
  for (const auto& b : biases) found += a.count(b[0]);
  if (found != 0 && found != 4)
    fail_input(path + ": holds " + std::to_string(found) +
               " of the 4 bias tensors; expected all (use_bias=True) or none");
  if (found) {
    expect_shape(a.at("query/bias"), {h, d_k}, path, "query/bias", "(h, key_dim)");
    expect_shape(a.at("key/bias"), {h, d_k}, path, "key/bias", "(h, key_dim)");
    expect_shape(a.at("value/bias"), {h, d_v}, path, "value/bias", "(h, value_dim)");
    expect_shape(a.at("attention_output/bias"), {o.shape[2]}, path, "attention_output/bias",
                 "(d_out,)");
    out.arrays["b_q"] = reshaped(a.at("query/bias"), {h * d_k});
    out.arrays["b_k"] = reshaped(a.at("key/bias"), {h * d_k});
    out.arrays["b_v"] = reshaped(a.at("value/bias"), {h * d_v});
    out.arrays["b_o"] = a.at("attention_output/bias");
  }
  return out;
}

}  // namespace

NpyArray transpose_2d(const NpyArray& a) {
  return transposed(a);
}

const char* to_string(WeightsFormat f) {
  switch (f) {
    case WeightsFormat::auto_detect:
      return "auto";
    case WeightsFormat::native:
      return "native";
    case WeightsFormat::torch:
      return "torch";
    case WeightsFormat::keras:
      return "keras";
    case WeightsFormat::preset:
      return "preset";
  }
  return "?";
}

namespace {

// The layout the names fit, or the message of to_native for names that fit none.
WeightsFormat detect_from_names(const std::vector<std::string>& names, const std::string& path) {
  std::size_t native = 0, torch = 0, keras = 0;
  for (const auto& name : names) {
    native += is_native_name(name);
    torch += !torch_name(name).empty();
    keras += !keras_name(name).empty();
  }
  const std::size_t n = names.size();
  if (n && native == n) return WeightsFormat::native;
  if (n && torch == n) return WeightsFormat::torch;
  if (n && keras == n) return WeightsFormat::keras;
  std::string shown;
  for (const auto& name : names) {
    if (shown.size() > 80) {
      shown += ", ...";
      break;
    }
    shown += (shown.empty() ? "" : ", ") + name;
  }
  fail_input(path + ": cannot tell the weights layout from the tensor names (" + shown +
             "); expected native (W_q, b_q, ...), torch (in_proj_weight, out_proj.weight, ...) "
             "or keras (query/kernel, ...) names");
}

void refuse_unknown_native(const std::string& name, const std::string& path) {
  if (!is_native_name(name))
    fail_input(path + ": unknown weight tensor '" + name +
               "' (expected native names W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o; "
               "set weights_format for torch or keras layouts)");
}

}  // namespace

WeightsFormat detect_weights_format(const Arrays& arrays, const std::string& path) {
  std::vector<std::string> names;
  for (const auto& [name, array] : arrays) names.push_back(name);
  return detect_from_names(names, path);
}

void check_weight_names(const std::vector<std::string>& names, WeightsFormat format,
                        const std::string& path) {
  if (has_layer_names(names)) return;  // Transformer layers: checked when converted
  if (format == WeightsFormat::auto_detect) {
    if (preset_for(names, path)) return;
    format = detect_from_names(names, path);
  }
  for (const auto& name : names) {
    if (format == WeightsFormat::native) refuse_unknown_native(name, path);
    if (format == WeightsFormat::torch && torch_name(name).empty())
      fail_input(path + ": unknown tensor '" + name +
                 "' in a PyTorch nn.MultiheadAttention state_dict");
    if (format == WeightsFormat::keras && keras_name(name).empty())
      fail_input(path + ": unknown tensor '" + name + "' in Keras MultiHeadAttention weights");
  }
}

NativeWeights to_native(const Arrays& arrays, WeightsFormat format, const std::string& path,
                        const Family* preset) {
  if (format == WeightsFormat::auto_detect)
    if ((preset = preset_for(arrays, path))) format = WeightsFormat::preset;
  if (format == WeightsFormat::preset) {
    if (!preset) fail_input(path + ": weights_format preset without a model family");
    const std::optional<ModelConfig> sizes = preset_model_config(*preset, path);
    return preset_to_native(select_layer(arrays, preset, std::nullopt, std::nullopt, path), *preset,
                            sizes ? &*sizes : nullptr, std::nullopt, path);
  }
  if (format == WeightsFormat::auto_detect) format = detect_weights_format(arrays, path);
  if (format == WeightsFormat::torch) return torch_to_native(arrays, path);
  if (format == WeightsFormat::keras) return keras_to_native(arrays, path);
  for (const auto& [name, array] : arrays) refuse_unknown_native(name, path);
  return {arrays, WeightsFormat::native, std::nullopt};
}

std::vector<std::pair<std::string, NpyArray>> from_native(const Arrays& a, WeightsFormat format,
                                                          std::optional<std::size_t> h,
                                                          const std::string& what) {
  for (const char* n : {"W_q", "W_k", "W_v", "W_o"})
    if (!a.count(n) || a.at(n).shape.size() != 2)
      fail_input(what + ": missing 2-D weight tensor '" + std::string(n) + "'");
  const bool bias = a.count("b_q");
  const NpyArray &W_q = a.at("W_q"), &W_k = a.at("W_k"), &W_v = a.at("W_v"), &W_o = a.at("W_o");
  std::vector<std::pair<std::string, NpyArray>> out;
  if (format == WeightsFormat::preset)
    fail_input(what + ": " + to_string(format) +
               " is a naming preset for reading checkpoints; "
               "write native, torch or keras");
  if (format == WeightsFormat::native || format == WeightsFormat::auto_detect) {
    for (const auto& n : weight_names(bias)) out.emplace_back(n, a.at(n));
    for (const char* n : {"q_norm", "k_norm"})
      if (a.count(n)) out.emplace_back(n, a.at(n));
    return out;
  }
  if (a.count("q_norm"))
    fail_input(what + ": QK-norm weights have no " + to_string(format) + " layout; write native");
  // Grouped-query weights (kv_heads < h) have fewer K columns than Q columns;
  // neither framework layer stores them.
  if (W_k.shape[1] != W_q.shape[1])
    fail_input(what + ": grouped-query weights (W_k " + shape_str(W_k.shape) + " has fewer " +
               "columns than W_q " + shape_str(W_q.shape) + ") have no " +
               (format == WeightsFormat::torch ? "PyTorch nn.MultiheadAttention"
                                               : "Keras MultiHeadAttention") +
               " layout; keep them native");
  if (format == WeightsFormat::torch) {
    const std::size_t E = W_q.shape[1];
    if (W_q.shape[0] != E || W_v.shape[1] != E || W_o.shape[0] != E || W_o.shape[1] != E)
      fail_input(what + ": the PyTorch layout needs d_model = h*d_k = h*d_v = d_out, but W_q is " +
                 shape_str(W_q.shape) + ", W_v " + shape_str(W_v.shape) + " and W_o " +
                 shape_str(W_o.shape));
    if (W_k.shape[0] == E && W_v.shape[0] == E) {
      NpyArray q = transposed(W_q), k = transposed(W_k), v = transposed(W_v);
      out.emplace_back("in_proj_weight", concat_rows({&q, &k, &v}));
    } else {
      out.emplace_back("q_proj_weight", transposed(W_q));
      out.emplace_back("k_proj_weight", transposed(W_k));
      out.emplace_back("v_proj_weight", transposed(W_v));
    }
    if (bias)
      out.emplace_back("in_proj_bias", concat_rows({&a.at("b_q"), &a.at("b_k"), &a.at("b_v")}));
    out.emplace_back("out_proj.weight", transposed(W_o));
    if (bias) out.emplace_back("out_proj.bias", a.at("b_o"));
    return out;
  }
  // Keras: split the head axis out of every projection.
  if (!h) fail_input(what + ": the Keras layout needs the number of heads h (--h)");
  const std::size_t H = *h;
  if (W_q.shape[1] % H || W_v.shape[1] % H)
    fail_input(what + ": W_q " + shape_str(W_q.shape) + " and W_v " + shape_str(W_v.shape) +
               " columns must be divisible by h = " + std::to_string(H));
  const std::size_t d_k = W_q.shape[1] / H, d_v = W_v.shape[1] / H;
  out.emplace_back("query/kernel", reshaped(W_q, {W_q.shape[0], H, d_k}));
  if (bias) out.emplace_back("query/bias", reshaped(a.at("b_q"), {H, d_k}));
  out.emplace_back("key/kernel", reshaped(W_k, {W_k.shape[0], H, d_k}));
  if (bias) out.emplace_back("key/bias", reshaped(a.at("b_k"), {H, d_k}));
  out.emplace_back("value/kernel", reshaped(W_v, {W_v.shape[0], H, d_v}));
  if (bias) out.emplace_back("value/bias", reshaped(a.at("b_v"), {H, d_v}));
  out.emplace_back("attention_output/kernel", reshaped(W_o, {H, d_v, W_o.shape[1]}));
  if (bias) out.emplace_back("attention_output/bias", a.at("b_o"));
  return out;
}

namespace {

// Refuses, before anything is read, an output path the finished file could
// not be renamed to: an existing directory, a path ending in '/', or one
// under an existing file. A parent that does not exist yet is created, as
// every output's is (OutputSet).
void check_output_path(const std::string& in, const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path path(out);
  std::error_code ec;
  if (!path.has_filename() || fs::is_directory(path, ec))
    fail_input(out + ": is a directory; expected the path of the file to write");
  for (fs::path up = path.parent_path(); !up.empty(); up = up.parent_path()) {
    if (fs::exists(up, ec)) {
      if (!fs::is_directory(up, ec))
        fail_input(out + ": " + up.string() + " is a file; expected a directory to write into");
      break;
    }
    if (up == up.parent_path()) break;
  }
  if (fs::exists(path, ec) && fs::exists(in, ec) && fs::equivalent(path, in, ec))
    fail_input(out + ": output would overwrite the input; choose another path");
}

// Conversion moves stored values as they are, so a tensor of another dtype
// would be written as it is and refused only when a run reads it.
void check_float_tensors(const std::map<std::string, NpyArray>& arrays, const std::string& in) {
  for (const auto& [name, a] : arrays)
    if (!is_float(a.dtype))
      fail_input(in + ": tensor '" + name + "' has dtype " + dtype_name(a.dtype) +
                 "; expected float16, float32 or float64 weights");
}

}  // namespace

WeightsFormat convert_weights_file(const std::string& in, WeightsFormat from, WeightsFormat to,
                                   std::optional<std::size_t> h, const std::string& out,
                                   const std::optional<std::string>& keras_layer) {
  check_output_path(in, out);
  // Keras' own files are written as Keras 3's .weights.h5 only: the name is
  // what Keras' save_weights demands, and .h5 or .keras would promise a
  // tf.keras file or a whole saved model.
  const bool keras_out = ends_with(out, ".weights.h5");
  const std::optional<FileKind> out_kind = kind_from_name(out);
  if (!keras_out && (out_kind == FileKind::hdf5 || out_kind == FileKind::keras))
    fail_input(out +
               ": Keras files are written as NAME.weights.h5 (Keras 3's load_weights); "
               "name the output so, or .npz / .safetensors");
  if (keras_out && to != WeightsFormat::keras && to != WeightsFormat::auto_detect)
    fail_input(out + ": a .weights.h5 holds the keras layout; use --to keras");
  WeightsCheck check;
  check.keras_layer = keras_layer;
  if (from != WeightsFormat::preset) check.names = from;
  const std::map<std::string, NpyArray> read = read_weight_arrays(in, check);
  check_float_tensors(read, in);
  const bool layers = has_layer_names(read);  // Transformer layers (layer_weights.hpp)
  NativeWeights native =
      layers ? layer_weights_to_native(read, from, in) : to_native(read, from, in);
  if (h && native.h && *h != *native.h)
    fail_input("--h " + std::to_string(*h) + " disagrees with " + in + ", whose kernels hold " +
               std::to_string(*native.h) + " heads");
  const std::filesystem::path path(out);
  OutputSet set(path.has_parent_path() ? path.parent_path().string() : ".");
  if (keras_out) {
    set.stage_bytes(path.filename().string(),
                    encode_keras_weights(native.arrays, h ? h : native.h, in));
    set.commit();
    return native.format;
  }
  auto arrays = layers ? layer_weights_from_native(native.arrays, to, in)
                       : from_native(native.arrays, to, h ? h : native.h, in);
  if (kind_from_name(out) == FileKind::safetensors)
    set.stage_bytes(path.filename().string(), encode_safetensors(arrays));
  else
    set.stage_npz(path.filename().string(), arrays);
  set.commit();
  return native.format;
}

}  // namespace mha
