#include "mha/config/presets.hpp"
#include "mha/io/json_file.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "mha/base/error.hpp"
#include "mha/checkpoint/model_config.hpp"
#include "mha/io/float16.hpp"

namespace mha {

namespace {

using Arrays = std::map<std::string, NpyArray>;

bool attention_role(Role r) {
  return r == Role::q || r == Role::k || r == Role::v || r == Role::qkv || r == Role::o ||
         r == Role::q_norm || r == Role::k_norm;
}

// A layer tensor's name within its layer: what follows "{l}.".
std::string in_layer(const TensorSpec& t) {
  const std::string name = t.name;
  const std::size_t at = name.find("{l}.");
  return at == std::string::npos ? name : name.substr(at + 4);
}

// The layer's query weight (q or fused q | k | v): what detection looks for.
const TensorSpec* query_spec(const Family& f) {
  for (const TensorSpec& t : f.tensors)
    if ((t.role == Role::q || t.role == Role::qkv) && t.part == Part::weight) return &t;
  return nullptr;
}

bool has_name(const std::vector<std::string>& names, const std::string& own) {
  for (const std::string& n : names)
    if (n == own ||
        (n.size() > own.size() && n.compare(n.size() - own.size(), own.size(), own) == 0 &&
         n[n.size() - own.size() - 1] == '.'))
      return true;
  return false;
}

// The layer numbering of a family: the name's last component before the
// number ("layer.", "h.", "layers."), after any prefix; group 1 is the prefix
// up to the number.
std::regex layer_pattern(const Family* f) {
  std::string before = "layers.";
  if (const TensorSpec* q = f ? query_spec(*f) : nullptr) {
    const std::string name = q->name;
    const std::string head = name.substr(0, name.find("{l}"));
    const std::size_t dot = head.find_last_of('.', head.size() >= 2 ? head.size() - 2 : 0);
    before = dot == std::string::npos || head.size() < 2 ? head : head.substr(dot + 1);
  }
  std::string escaped;
  for (char ch : before) escaped += ch == '.' ? std::string("\\.") : std::string(1, ch);
  return std::regex("^((?:.*\\.)?" + escaped + ")(\\d+)\\.");
}

// The model's features from what config.json gives (`file`, possibly
// partial or null) over placeholder sizes: each family's defaults otherwise.
ModelConfig numerics(const Family& f, const nlohmann::json* file) {
  nlohmann::json j = {
      {"num_hidden_layers", 1024}, {"intermediate_size", 1}, {"ffn_dim", 1}, {"vocab_size", 1}};
  std::int64_t heads = 1;
  for (const char* key : {"num_attention_heads", "n_head"})
    if (file && file->contains(key) && (*file)[key].is_number_integer())
      heads = std::max<std::int64_t>(1, (*file)[key].get<std::int64_t>());
  j["num_attention_heads"] = heads;
  j["hidden_size"] = heads * 64;
  if (file)
    for (const auto& [key, value] : file->items()) j[key] = value;
  if (!file) j["model_type"] = f.model_types.front();
  return parse_model_config(j.dump(), file ? "config.json" : std::string(f.name) + " defaults");
}

// config.json beside `weights_path`, unless its model_type belongs to
// another family (one without model_type is taken as the family's).
std::string config_path(const std::string& weights_path) {
  return (std::filesystem::path(weights_path).parent_path() / "config.json").string();
}

// The config.json object beside the weights, if there is one.
std::optional<nlohmann::json> config_beside(const std::string& weights_path) {
  const std::string file = config_path(weights_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  nlohmann::json j = read_json_file(file, json_kind::model_config);
  if (!j.is_object()) return std::nullopt;
  return j;
}

// A whole config.json read as `mha run --model` reads it; none for a partial one.
std::optional<ModelConfig> complete_config(const nlohmann::json& j,
                                           const std::string& weights_path) {
  try {
    return parse_model_config(j.dump(), config_path(weights_path));
  } catch (const Error&) {
    return std::nullopt;  // a partial config.json: apply_preset_settings reads what it gives
  }
}

std::optional<nlohmann::json> beside(const Family& family, const std::string& weights_path) {
  std::optional<nlohmann::json> found = config_beside(weights_path);
  if (!found) return std::nullopt;
  nlohmann::json& j = *found;
  if (!j.contains("model_type")) {
    j["model_type"] = family.model_types.front();
    return j;
  }
  if (!j["model_type"].is_string() || find_family(j["model_type"].get<std::string>()) != &family)
    return std::nullopt;
  return found;
}

ModelConfig family_defaults(const Family& f) {
  return numerics(f, nullptr);
}

// Pieces of a (rows, cols) array: rows (along_rows) or columns, into a new
// array; a 1-D array's elements.
NpyArray gather(const NpyArray& a, const std::vector<Piece>& pieces, bool along_rows) {
  const std::size_t w = itemsize(a.dtype);
  std::size_t n = 0;
  for (const Piece& p : pieces) n = std::max(n, p.to + p.count);
  NpyArray out;
  out.dtype = a.dtype;
  if (a.shape.size() == 1 || along_rows) {
    const std::size_t row = a.shape.size() == 1 ? 1 : a.shape[1];
    out.shape =
        a.shape.size() == 1 ? std::vector<std::size_t>{n} : std::vector<std::size_t>{n, row};
    out.data.resize(n * row * w);
    for (const Piece& p : pieces)
      std::copy_n(a.data.begin() + static_cast<std::ptrdiff_t>(p.from * row * w), p.count * row * w,
                  out.data.begin() + static_cast<std::ptrdiff_t>(p.to * row * w));
    return out;
  }
  const std::size_t rows = a.shape[0], cols = a.shape[1];
  out.shape = {rows, n};
  out.data.resize(rows * n * w);
  for (std::size_t r = 0; r < rows; ++r)
    for (const Piece& p : pieces)
      std::copy_n(a.data.begin() + static_cast<std::ptrdiff_t>((r * cols + p.from) * w),
                  p.count * w, out.data.begin() + static_cast<std::ptrdiff_t>((r * n + p.to) * w));
  return out;
}

const NpyArray* find_tensor(const Arrays& a, const std::string& name) {
  auto it = a.find(name);
  return it == a.end() ? nullptr : &it->second;
}

// a + 1 elementwise in float32 (Gemma's (1 + w) QK-norms).
NpyArray plus_one(const NpyArray& a, const std::string& what) {
  NpyArray out;
  out.dtype = DType::f4;
  out.shape = a.shape;
  const std::size_t count = a.data.size() / itemsize(a.dtype);
  out.data.resize(count * 4);
  for (std::size_t i = 0; i < count; ++i) {
    double v = 0;
    if (a.dtype == DType::f2) {
      float16 h;
      std::memcpy(&h, a.data.data() + 2 * i, 2);
      v = to_double(h);
    } else if (a.dtype == DType::f4) {
      float x;
      std::memcpy(&x, a.data.data() + 4 * i, 4);
      v = x;
    } else if (a.dtype == DType::f8) {
      std::memcpy(&v, a.data.data() + 8 * i, 8);
    } else {
      fail_input(what + ": expected a float tensor, got " + dtype_name(a.dtype));
    }
    const float f = static_cast<float>(v) + 1.0f;
    std::memcpy(out.data.data() + 4 * i, &f, 4);
  }
  return out;
}

}  // namespace

const Family* preset_family(const std::string& name) {
  for (const Family* f : families())
    if (name == f->name) return f;
  return find_family(name);
}

const Family* detect_preset(const std::vector<std::string>& names) {
  for (const Family* f : families())
    if (const TensorSpec* q = query_spec(*f); q && has_name(names, in_layer(*q))) return f;
  return nullptr;
}

const Family* detect_preset(const Arrays& a) {
  std::vector<std::string> names;
  for (const auto& [name, x] : a) names.push_back(name);
  return detect_preset(names);
}

const Family* preset_for(const std::vector<std::string>& names, const std::string& weights_path) {
  const Family* named = detect_preset(names);
  if (!named) return nullptr;
  const std::optional<nlohmann::json> j = config_beside(weights_path);
  if (!j || !j->contains("model_type") || !(*j)["model_type"].is_string()) return named;
  const Family* f = find_family((*j)["model_type"].get<std::string>());
  const TensorSpec* q = f ? query_spec(*f) : nullptr;
  return q && has_name(names, in_layer(*q)) ? f : named;
}

const Family* preset_for(const Arrays& a, const std::string& weights_path) {
  std::vector<std::string> names;
  for (const auto& [name, x] : a) names.push_back(name);
  return preset_for(names, weights_path);
}

std::map<std::string, std::string> layer_names(const std::vector<std::string>& names,
                                               const Family* preset,
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
  const std::regex pattern = layer_pattern(preset);
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

Arrays select_layer(const Arrays& a, const Family* preset, std::optional<std::int64_t> layer_index,
                    const std::optional<std::string>& prefix, const std::string& path) {
  std::vector<std::string> names;
  for (const auto& [name, x] : a) names.push_back(name);
  Arrays out;
  for (const auto& [full, own] : layer_names(names, preset, layer_index, prefix, path))
    out[own] = a.at(full);
  return out;
}

std::optional<ModelConfig> preset_model_config(const Family& family,
                                               const std::string& weights_path) {
  const std::optional<nlohmann::json> j = beside(family, weights_path);
  return j ? complete_config(*j, weights_path) : std::nullopt;
}

NativeWeights preset_to_native(const Arrays& a, const Family& preset, const ModelConfig* sizes,
                               std::optional<std::int64_t> h, const std::string& path) {
  NativeWeights w;
  w.format = WeightsFormat::preset;
  w.family = &preset;
  auto& n = w.arrays;
  const ModelConfig defaults = sizes ? ModelConfig{} : family_defaults(preset);
  const ModelConfig& m = sizes ? *sizes : defaults;
  const char* names[3] = {"q", "k", "v"};
  for (const TensorSpec& t : preset.tensors) {
    // An encoder-decoder's preset layer is an encoder layer.
    if (!per_layer(t.role) || !attention_role(t.role) || t.stack != Stack::main) continue;
    const std::string own = in_layer(t);
    const NpyArray* x = find_tensor(a, own);
    if (!x) {
      if (t.when == When::always) fail_input(path + ": missing tensor '" + own + "' of the layer");
      continue;  // a bias, a QK-norm: the layers that have them
    }
    const bool bias = t.part == Part::bias;
    const bool matrix = !bias && t.cols != Dim::none;
    if (matrix && x->shape.size() != 2)
      fail_input(path + ": " + own + " has shape " + shape_str(x->shape) + ", expected a matrix");
    if (!matrix && x->shape.size() != 1)
      fail_input(path + ": " + own + " has shape " + shape_str(x->shape) + ", expected a vector");
    const std::string kind = bias ? "b_" : "W_";
    auto convert = [&](const NpyArray& part) {  // the kernel's (in, out)
      return matrix && t.layout != Layout::conv1d ? transpose_2d(part) : part;
    };
    switch (t.role) {
      case Role::q_norm:
      case Role::k_norm:
        n[t.role == Role::q_norm ? "q_norm" : "k_norm"] =
            m.norm_plus_one ? plus_one(*x, path + ": " + own) : *x;
        break;
      case Role::qkv: {
        // The parts' sizes: config.json's, else thirds (h per-head groups when interleaved).
        ModelConfig g = m;
        const std::size_t total = matrix && t.layout == Layout::conv1d ? x->shape[1] : x->shape[0];
        if (!sizes) {
          const std::size_t heads =
              t.layout == Layout::linear_heads ? std::size_t(h.value_or(0)) : 1;
          if (heads == 0)
            fail_input(path + ": " + own + " holds q, k and v per head; expected h (or a " +
                       "config.json beside the weights) to split it");
          if (total % (3 * heads))
            fail_input(path + ": " + own + " has shape " + shape_str(x->shape) +
                       ", expected q | k | v of equal sizes (3E)");
          g.h = g.kv_heads = heads;
          g.head_dim = total / (3 * heads);
        } else if (total != (g.h + 2 * g.kv_heads) * g.head_dim) {
          fail_input(path + ": " + own + " has shape " + shape_str(x->shape) +
                     ", config.json implies " +
                     std::to_string((g.h + 2 * g.kv_heads) * g.head_dim) + " q | k | v features");
        }
        for (std::size_t s = 0; s < 3; ++s)
          n[kind + names[s]] =
              convert(gather(*x, pieces(t, s, g), !matrix || t.layout != Layout::conv1d));
        break;
      }
      default:
        n[kind + std::string(t.role == Role::q   ? "q"
                             : t.role == Role::k ? "k"
                             : t.role == Role::v ? "v"
                                                 : "o")] = convert(*x);
    }
  }
  if (n.count("b_q") && !n.count("b_o")) {  // Qwen2: no output bias; the kernel adds four or none
    const NpyArray& Wo = n.at("W_o");
    NpyArray zero;
    zero.dtype = Wo.dtype;
    zero.shape = {Wo.shape[1]};
    zero.data.assign(Wo.shape[1] * itemsize(Wo.dtype), 0);
    n["b_o"] = std::move(zero);
  }
  return w;
}

NativeWeights preset_layer_to_native(const Arrays& a, const Family& preset,
                                     const ModelConfig* sizes, const std::string& path) {
  const ModelConfig defaults = sizes ? ModelConfig{} : family_defaults(preset);
  const ModelConfig& m = sizes ? *sizes : defaults;
  if (m.norm_placement != NormPlacement::post || m.rms_norm)
    fail_input(path + ": whole " + preset.name +
               " layers are not read yet (their norms and MLPs differ from this tool's "
               "layers); use layer attention for their attention");
  NativeWeights w;
  w.format = WeightsFormat::preset;
  w.family = &preset;
  for (auto& [name, array] : preset_to_native(a, preset, sizes, std::nullopt, path).arrays)
    w.arrays["layers.0.self_attn." + name] = array;
  for (const TensorSpec& t : preset.tensors) {
    if (!per_layer(t.role) || attention_role(t.role)) continue;
    std::string own = in_layer(t);
    const bool bias = t.part == Part::bias;
    // nn.LayerNorm's weight/bias, or gamma/beta in checkpoints converted from TensorFlow
    const bool norm = t.role == Role::attn_norm || t.role == Role::ffn_norm;
    if (norm && !a.count(own)) {
      const std::string tf = own.substr(0, own.rfind('.')) + (bias ? ".beta" : ".gamma");
      if (a.count(tf)) own = tf;
    }
    const NpyArray* x = find_tensor(a, own);
    if (!x) fail_input(path + ": missing tensor '" + own + "' of the layer");
    std::string to;
    if (norm)
      to = std::string(t.role == Role::attn_norm ? "norm1" : "norm2") + (bias ? ".beta" : ".gamma");
    else if (t.role == Role::up || t.role == Role::down)
      to = std::string("ffn.") + (bias ? "b_" : "W_") + (t.role == Role::up ? "1" : "2");
    else
      continue;  // nothing else in a post-norm LayerNorm encoder layer
    w.arrays["layers.0." + to] =
        x->shape.size() == 1 || t.layout == Layout::conv1d ? *x : transpose_2d(*x);
  }
  return w;
}

void apply_preset_settings(Config& c, const Family& preset, const std::string& weights_path) {
  const std::optional<nlohmann::json> file = beside(preset, weights_path);
  const ModelConfig m = numerics(preset, file ? &*file : nullptr);
  const bool complete = file && complete_config(*file, weights_path).has_value();
  const std::size_t l =
      static_cast<std::size_t>(std::max<std::int64_t>(0, c.layer_index.value_or(0)));
  auto given = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (file && file->contains(k) && (*file)[k].is_number_integer()) return true;
    return false;
  };
  if (!c.h && given({"num_attention_heads", "n_head"})) c.h = static_cast<std::int64_t>(m.h);
  if (!c.kv_heads && given({"num_key_value_heads"}) && m.kv_heads != m.h)
    c.kv_heads = static_cast<std::int64_t>(m.kv_heads);
  if (!c.d_k && given({"head_dim"}) && m.head_dim * m.h != m.d_model)
    c.d_k = static_cast<std::int64_t>(m.head_dim);
  if (c.qk_norm_eps == 1e-6 && file) c.qk_norm_eps = m.norm_eps;
  if (m.rope && c.rope == Config::RopeKind::none) {
    if (!complete && m.rotary_fraction != 1)
      fail_input(weights_path + ": a " + preset.name +
                 " layer rotates part of each head; expected its whole config.json beside the "
                 "weights");
    const bool local = m.layer_sliding(l) && m.rope_local_theta > 0;
    c.rope = Config::RopeKind::half;
    if (c.rope_theta == 10000) c.rope_theta = local ? m.rope_local_theta : m.rope_theta;
    if (c.rope_scaling == 1 && !local) c.rope_scaling = m.rope_scaling;
    if (!c.rope_dim && m.rotary_dim != m.head_dim)
      c.rope_dim = static_cast<std::int64_t>(m.rotary_dim);
  }
  if (!c.scale && std::abs(m.attn_scale * std::sqrt(double(m.head_dim)) - 1) > 1e-12)
    c.scale = m.attn_scale;  // query_pre_attn_scalar
  if (!c.softcap && m.attn_softcap > 0) c.softcap = m.attn_softcap;
  if (!c.window && file && m.layer_sliding(l))
    c.window = static_cast<std::int64_t>(m.sliding_window);
  if (c.layer != LayerKind::attention) {
    c.activation = m.activation;
    c.norm_first = m.norm_placement != NormPlacement::post;
    if (c.layer_norm_eps == 1e-5) c.layer_norm_eps = m.norm_eps;
  }
  if (m.causal && !c.causal_given) {
    c.causal = Causal::top_left;
    c.causal_given = true;
  }
}

}  // namespace mha
