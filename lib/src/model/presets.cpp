#include "mha/model/presets.hpp"
#include "mha/io/json_file.hpp"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "mha/base/error.hpp"

namespace mha {

namespace {

using Arrays = std::map<std::string, NpyArray>;

// The layer numbering of each preset: group 1 is the prefix up to the number.
const std::regex& layer_pattern(WeightsFormat p) {
  static const std::regex bert(R"(^((?:.*\.)?encoder\.layer\.)(\d+)\.)");
  static const std::regex gpt2(R"(^((?:.*\.)?h\.)(\d+)\.)");
  static const std::regex any(R"(^((?:.*\.)?layers\.)(\d+)\.)");
  return p == WeightsFormat::bert ? bert : p == WeightsFormat::gpt2 ? gpt2 : any;
}

NpyArray transposed(const NpyArray& a, const std::string& what) {
  if (a.shape.size() != 2)
    fail_input(what + " has shape " + shape_str(a.shape) + ", expected a matrix");
  return transpose_2d(a);
}

NpyArray columns(const NpyArray& a, std::size_t c0, std::size_t c1) {
  const std::size_t rows = a.shape.size() == 2 ? a.shape[0] : 1, cols = a.shape.back();
  const std::size_t w = itemsize(a.dtype);
  NpyArray out;
  out.dtype = a.dtype;
  out.shape = a.shape.size() == 2 ? std::vector<std::size_t>{rows, c1 - c0}
                                  : std::vector<std::size_t>{c1 - c0};
  for (std::size_t r = 0; r < rows; ++r)
    out.data.insert(out.data.end(),
                    a.data.begin() + static_cast<std::ptrdiff_t>((r * cols + c0) * w),
                    a.data.begin() + static_cast<std::ptrdiff_t>((r * cols + c1) * w));
  return out;
}

const NpyArray& need(const Arrays& a, const std::string& name, const std::string& path) {
  auto it = a.find(name);
  if (it == a.end()) fail_input(path + ": missing tensor '" + name + "' of the layer");
  return it->second;
}

}  // namespace

std::optional<WeightsFormat> detect_preset(const std::vector<std::string>& names) {
  auto has = [&](const char* fragment) {
    for (const auto& name : names)
      if (name.find(fragment) != std::string::npos) return true;
    return false;
  };
  if (has("attention.self.query.")) return WeightsFormat::bert;
  if (has("attn.c_attn.")) return WeightsFormat::gpt2;
  if (has("self_attn.q_proj.")) return WeightsFormat::llama;
  return std::nullopt;
}

std::optional<WeightsFormat> detect_preset(const Arrays& a) {
  std::vector<std::string> names;
  for (const auto& [name, x] : a) names.push_back(name);
  return detect_preset(names);
}

std::map<std::string, std::string> layer_names(const std::vector<std::string>& names,
                                               std::optional<WeightsFormat> preset,
                                               std::optional<std::int64_t> layer_index,
                                               const std::optional<std::string>& prefix,
                                               const std::string& path) {
  std::map<std::string, std::string> out;  // full name -> the layer's own name
  if (prefix) {
    for (const auto& name : names)
      if (name.compare(0, prefix->size(), *prefix) == 0) out[name] = name.substr(prefix->size());
    if (out.empty())
      fail_input(path + ": no tensor name starts with weights_prefix '" + *prefix + "'");
    return out;
  }
  const std::regex& pattern = layer_pattern(preset.value_or(WeightsFormat::llama));
  std::map<std::int64_t, std::string> layers;  // number -> prefix
  for (const auto& name : names) {
    std::smatch m;
    if (std::regex_search(name, m, pattern))
      layers[std::stoll(m[2].str())] = m[1].str() + m[2].str() + ".";
  }
  if (layers.empty()) {
    if (layer_index)
      fail_input(path + ": layer_index " + std::to_string(*layer_index) +
                 ", but the file's tensor names are numbered by no layer");
    for (const auto& name : names) out[name] = name;  // already one layer's names
    return out;
  }
  std::string found;
  for (const auto& [n, p] : layers) found += (found.empty() ? "" : ", ") + std::to_string(n);
  if (!layer_index && layers.size() > 1)
    fail_input(path + ": holds " + std::to_string(layers.size()) + " layers (" + found +
               "); choose one with layer_index");
  const std::int64_t index = layer_index.value_or(layers.begin()->first);
  auto it = layers.find(index);
  if (it == layers.end())
    fail_input(path + ": no layer " + std::to_string(index) + "; the file holds layers " + found);
  for (const auto& name : names)
    if (name.compare(0, it->second.size(), it->second) == 0)
      out[name] = name.substr(it->second.size());
  return out;
}

Arrays select_layer(const Arrays& a, std::optional<WeightsFormat> preset,
                    std::optional<std::int64_t> layer_index,
                    const std::optional<std::string>& prefix, const std::string& path) {
  std::vector<std::string> names;
  for (const auto& [name, x] : a) names.push_back(name);
  Arrays out;
  for (const auto& [full, own] : layer_names(names, preset, layer_index, prefix, path))
    out[own] = a.at(full);
  return out;
}

NativeWeights preset_to_native(const Arrays& a, WeightsFormat preset, const std::string& path) {
  NativeWeights w;
  w.format = preset;
  auto& n = w.arrays;
  if (preset == WeightsFormat::bert) {
    const std::string s = "attention.self.";
    for (const auto& [from, to] : {std::pair{"query", "q"}, {"key", "k"}, {"value", "v"}}) {
      n[std::string("W_") + to] =
          transposed(need(a, s + from + ".weight", path), path + ": " + s + from + ".weight");
      n[std::string("b_") + to] = need(a, s + from + ".bias", path);
    }
    n["W_o"] = transposed(need(a, "attention.output.dense.weight", path),
                          path + ": attention.output.dense.weight");
    n["b_o"] = need(a, "attention.output.dense.bias", path);
    return w;
  }
  if (preset == WeightsFormat::gpt2) {
    const NpyArray& W = need(a, "attn.c_attn.weight", path);  // Conv1D: (E, 3E), x @ W
    const NpyArray& b = need(a, "attn.c_attn.bias", path);
    if (W.shape.size() != 2 || W.shape[1] != 3 * W.shape[0] ||
        b.shape != std::vector<std::size_t>{W.shape[1]})
      fail_input(path + ": attn.c_attn.weight " + shape_str(W.shape) + " and bias " +
                 shape_str(b.shape) + ", expected (E, 3E) and (3E,)");
    const std::size_t E = W.shape[0];
    n["W_q"] = columns(W, 0, E), n["W_k"] = columns(W, E, 2 * E),
    n["W_v"] = columns(W, 2 * E, 3 * E);
    n["b_q"] = columns(b, 0, E), n["b_k"] = columns(b, E, 2 * E),
    n["b_v"] = columns(b, 2 * E, 3 * E);
    n["W_o"] = need(a, "attn.c_proj.weight", path);
    n["b_o"] = need(a, "attn.c_proj.bias", path);
    return w;
  }
  // llama
  const std::string s = "self_attn.";
  for (const char* p : {"q", "k", "v", "o"})
    n[std::string("W_") + p] =
        transposed(need(a, s + p + "_proj.weight", path), path + ": " + s + p + "_proj.weight");
  if (a.count(s + "q_norm.weight") || a.count(s + "k_norm.weight")) {  // Qwen3's QK-norm
    n["q_norm"] = need(a, s + "q_norm.weight", path);
    n["k_norm"] = need(a, s + "k_norm.weight", path);
  }
  if (a.count(s + "q_proj.bias")) {  // Qwen2: q, k, v biases; the output projection has none
    for (const char* p : {"q", "k", "v"})
      n[std::string("b_") + p] = need(a, s + p + "_proj.bias", path);
    const NpyArray& Wo = n["W_o"];
    NpyArray zero;
    zero.dtype = Wo.dtype;
    zero.shape = {Wo.shape[1]};
    zero.data.assign(Wo.shape[1] * itemsize(Wo.dtype), 0);
    n["b_o"] = std::move(zero);
  }
  return w;
}

NativeWeights bert_layer_to_native(const Arrays& a, const std::string& path) {
  NativeWeights w;
  w.format = WeightsFormat::bert;
  for (auto& [name, array] : preset_to_native(a, WeightsFormat::bert, path).arrays)
    w.arrays["layers.0.self_attn." + name] = array;
  auto norm = [&](const std::string& from, const std::string& to) {
    // nn.LayerNorm's weight/bias, or gamma/beta in checkpoints converted from TensorFlow
    const bool tf = a.count(from + ".gamma") > 0;
    w.arrays["layers.0." + to + ".gamma"] = need(a, from + (tf ? ".gamma" : ".weight"), path);
    w.arrays["layers.0." + to + ".beta"] = need(a, from + (tf ? ".beta" : ".bias"), path);
  };
  norm("attention.output.LayerNorm", "norm1");
  norm("output.LayerNorm", "norm2");
  w.arrays["layers.0.ffn.W_1"] =
      transposed(need(a, "intermediate.dense.weight", path), path + ": intermediate.dense.weight");
  w.arrays["layers.0.ffn.b_1"] = need(a, "intermediate.dense.bias", path);
  w.arrays["layers.0.ffn.W_2"] =
      transposed(need(a, "output.dense.weight", path), path + ": output.dense.weight");
  w.arrays["layers.0.ffn.b_2"] = need(a, "output.dense.bias", path);
  return w;
}

void apply_preset_settings(Config& c, WeightsFormat preset, const std::string& weights_path) {
  const std::filesystem::path file =
      std::filesystem::path(weights_path).parent_path() / "config.json";
  nlohmann::json model = nlohmann::json::object();
  std::error_code ec;
  if (std::filesystem::is_regular_file(file, ec)) {
    model = read_json_file(file.string(), json_kind::model_config);
  }
  auto number = [&](const char* key) -> std::optional<std::int64_t> {
    if (model.contains(key) && model[key].is_number_integer())
      return model[key].get<std::int64_t>();
    return std::nullopt;
  };
  if (!c.h) c.h = number("num_attention_heads") ? number("num_attention_heads") : number("n_head");
  if (preset == WeightsFormat::llama) {
    if (!c.kv_heads) c.kv_heads = number("num_key_value_heads");
    if (c.rope == Config::RopeKind::none) c.rope = Config::RopeKind::half;
    if (c.rope_theta == 10000 && model.contains("rope_theta") && model["rope_theta"].is_number())
      c.rope_theta = model["rope_theta"].get<double>();
    if (!c.d_k && number("head_dim")) c.d_k = number("head_dim");
    if (c.qk_norm_eps == 1e-6 && model.contains("rms_norm_eps") &&
        model["rms_norm_eps"].is_number())
      c.qk_norm_eps = model["rms_norm_eps"].get<double>();
  }
  if (preset == WeightsFormat::bert && c.layer != LayerKind::attention) {
    c.activation = Activation::gelu;  // BERT's hidden_act
    c.norm_first = false;
    if (c.layer_norm_eps == 1e-5)
      c.layer_norm_eps = model.contains("layer_norm_eps") && model["layer_norm_eps"].is_number()
                             ? model["layer_norm_eps"].get<double>()
                             : 1e-12;
  }
  if ((preset == WeightsFormat::gpt2 || preset == WeightsFormat::llama) && !c.causal_given) {
    c.causal = Causal::top_left;
    c.causal_given = true;
  }
}

}  // namespace mha
