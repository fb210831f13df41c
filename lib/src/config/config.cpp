#include "mha/config/config.hpp"
#include "mha/config/presets.hpp"

#include "mha/io/json_file.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/utf8.hpp"
#include "mha/config/memory.hpp"

namespace mha {
namespace {

using json = nlohmann::json;

// Sizes above 2^30 cannot fit in memory as a tensor anyway; the cap keeps
// every product of two sizes far from 64-bit overflow.
constexpr std::int64_t kMaxSize = std::int64_t{1} << 30;
// Timed repetitions of the compute: enough for any median, and a typo such as
// 50000 is refused rather than run for hours.
constexpr std::int64_t kMaxRepeat = 1000;

const std::vector<ConfigKey> kKeys = {
    {"h", "INT", "number of heads", false},
    {"d_model", "INT", "feature size of the query input", false},
    {"d_k", "INT", "per-head query/key size (default d_model / h)", false},
    {"d_v", "INT", "per-head value size (default d_k)", false},
    {"kdim", "INT", "feature size of the key input (default d_model)", false},
    {"vdim", "INT", "feature size of the value input (default d_model)", false},
    {"d_out", "INT", "output feature size (default d_model)", false},
    {"batch", "INT", "batch size B (default: from inputs, else 1)", false},
    {"seq_len", "INT", "query length T (default: from inputs)", false},
    {"kv_seq_len", "INT", "key/value length S (default: from inputs, else seq_len)", false},
    {"use_bias", "BOOL", "projections have biases (default: from weights, else true)", true},
    {"scale", "FLOAT", "logit scale (default 1/sqrt(d_k))", false},
    {"dtype", "TYPE", "compute precision: float32, float64 or bfloat16 (bfloat16 GEMM operands)",
     false},
    {"seed", "INT", "seed for random inputs and weights (default 0)", false},
    {"threads", "INT", "worker threads (default 0 = all cores)", false},
    {"max_memory", "SIZE", "refuse runs needing more (default 80% of RAM), e.g. 8GiB", false},
    {"allow_nonfinite", "BOOL", "accept NaN/Inf in inputs and weights", true},
    {"repeat", "INT",
     "time the compute N more times after a discarded warm call: median, min, max (default 1)",
     false},
    {"warmup", "BOOL",
     "call the compute once untimed before the timed one (default false; sweeps: true)", true},
    {"query", "PATH", ".npy query input (B,T,d_model) or (T,d_model)", false},
    {"key", "PATH", ".npy key input (B,S,kdim) or (S,kdim)", false},
    {"value", "PATH", ".npy value input (B,S,vdim) or (S,vdim)", false},
    {"weights", "PATH",
     ".npz, directory of NAME.npy, .safetensors, or Keras .h5/.weights.h5/.keras weights", false},
    {"weights_format", "LAYOUT",
     "weights layout: auto, native, torch, keras, or a checkpoint preset: a model family or "
     "model_type (docs/models.md)",
     false},
    {"layer_index", "INT", "the layer to take from a whole-model checkpoint", false},
    {"weights_prefix", "TEXT", "take the weights whose names start with this, prefix stripped",
     false},
    {"keras_layer", "TEXT",
     "the MultiHeadAttention or encoder block to take from a Keras .h5/.keras file, by name",
     false},
    {"causal", "MODE", "false, true (top-left) or bottom-right", true},
    {"mask", "PATH", ".npy mask: bool (true = attend) or float (added to logits)", false},
    {"mask_true_means", "MEANING", "true in a bool mask means attend (default) or ignore", false},
    {"key_padding_mask", "PATH", ".npy (B,S): bool true = padding, or float added", false},
    {"key_lengths", "LIST", "B comma-separated ints, or a .npy file", false},
    {"masked_rows", "POLICY", "fully masked query rows: zero, uniform or nan", false},
    {"out_dir", "DIR", "output directory (default out)", false},
    {"save_attention", "BOOL", "write attention.npy", true},
    {"average_heads", "BOOL", "write attention averaged over heads (B,T,S)", true},
    {"plot", "BOOL", "write attention.png: batch 0's attention maps as heatmaps", true},
    {"save_weights", "LAYOUT", "write weights.npz: true (native), native, torch or keras", true},
    {"save_inputs", "BOOL", "write the inputs used as .npy", true},
    // Attention variants (docs/config.md, "Attention variants").
    {"kv_heads", "INT", "key/value heads for grouped-query attention (default h; 1 = MQA)", false},
    {"window", "INT", "sliding window: keys within this distance of the query (default none)",
     false},
    {"alibi", "BOOL", "ALiBi position bias: -slope_i * |t - s| added to head i's logits", true},
    {"bias", "PATH", ".npy float bias broadcastable to (B,h,T,S), added to the logits", false},
    {"softcap", "FLOAT", "logits <- softcap * tanh(logits / softcap) before masking", false},
    {"attention_axes", "LIST", "axes of an N-D query to attend over (Keras), e.g. 2,3", false},
    {"output_dtype", "TYPE",
     "dtype of written tensors: float16, float32 or float64 (default: the compute dtype)", false},
    {"rope", "LAYOUT", "rotary positions on q and k: half (LLaMA), interleaved (GPT-J) or false",
     true},
    {"rope_theta", "FLOAT", "RoPE base (default 10000)", false},
    {"rope_dim", "INT", "features per head that rotate (default d_k)", false},
    {"position_offset", "INT", "the first query's position for RoPE (keys start at 0)", false},
    {"rope_scaling", "FLOAT", "linear RoPE position scaling factor >= 1 (default 1)", false},
    {"qk_norm_eps", "FLOAT", "QK-norm RMSNorm epsilon, with q_norm/k_norm weights (default 1e-6)",
     false},
    // Transformer layers (docs/layers.md).
    {"layer", "KIND", "attention (default), encoder or decoder: Transformer layers around it",
     false},
    {"num_layers", "INT", "layers in the stack (default 1)", false},
    {"d_ff", "INT", "feed-forward width (default 4 * d_model)", false},
    {"activation", "NAME", "feed-forward activation: relu (default), gelu or gelu_tanh", false},
    {"norm_first", "BOOL", "pre-norm layers (default false: post-norm)", true},
    {"layer_norm_eps", "FLOAT", "LayerNorm epsilon (default 1e-5)", false},
    {"final_norm", "BOOL", "a LayerNorm after the last layer", true},
    {"memory", "PATH", "decoder: .npy memory (B,S,d_model) for cross-attention", false},
    {"memory_key_lengths", "LIST", "decoder: B comma-separated valid memory lengths", false},
    {"save_hidden_states", "BOOL", "write hidden_states.npy: every layer's output", true},
};

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

std::string json_excerpt(const json& v) {
  // A flag's bytes that are not UTF-8 cannot be dumped: echo() escapes them.
  if (v.is_string() && invalid_utf8_at(v.get_ref<const std::string&>()) != std::string::npos)
    return echo(v.get_ref<const std::string&>(), 37);
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::int64_t get_int(const json& v, const std::string& where, std::int64_t lo, std::int64_t hi) {
  auto range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo)
      return static_cast<std::int64_t>(u);
    fail_input(where + ": expected an integer in " + range + ", got " + v.dump());
  }
  if (v.is_number_integer()) {
    auto i = v.get<std::int64_t>();
    if (i >= lo && i <= hi) return i;
    fail_input(where + ": expected an integer in " + range + ", got " + v.dump());
  }
  fail_input(where + ": expected an integer in " + range + ", got " + json_excerpt(v));
}

bool get_bool(const json& v, const std::string& where) {
  if (!v.is_boolean()) fail_input(where + ": expected true or false, got " + json_excerpt(v));
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& where, const char* what) {
  if (!v.is_string() || v.get<std::string>().empty())
    fail_input(where + ": expected " + what + ", got " + json_excerpt(v));
  return v.get<std::string>();
}

template <class Enum, std::size_t N>
Enum get_enum(const json& v, const std::string& where,
              const std::pair<const char*, Enum> (&names)[N]) {
  std::string expected;
  for (std::size_t i = 0; i < N; ++i) {
    if (v.is_string() && v.get<std::string>() == names[i].first) return names[i].second;
    expected += (i ? (i + 1 == N ? " or " : ", ") : "") + quote(names[i].first);
  }
  fail_input(where + ": expected " + expected + ", got " + json_excerpt(v));
}

// The keys of one kind each: sizes, paths and on/off flags; named choices;
// numbers with their own ranges; lists. Each returns false for a key that is
// not of its kind. `where` names the key and its source in messages.

bool set_size_path_or_flag(Config& c, const std::string& key, const json& v,
                           const std::string& where) {
  auto size = [&](std::optional<std::int64_t>& field) {
    field = v.is_null() ? std::nullopt : std::optional(get_int(v, where, 1, kMaxSize));
    return true;
  };
  auto path = [&](std::optional<std::string>& field) {
    field =
        v.is_null() ? std::nullopt : std::optional(get_string(v, where, "a file path (string)"));
    return true;
  };
  auto flag = [&](bool& field, bool dflt) {
    field = v.is_null() ? dflt : get_bool(v, where);
    return true;
  };
  if (key == "h") return size(c.h);
  if (key == "d_model") return size(c.d_model);
  if (key == "d_k") return size(c.d_k);
  if (key == "d_v") return size(c.d_v);
  if (key == "kdim") return size(c.kdim);
  if (key == "vdim") return size(c.vdim);
  if (key == "d_out") return size(c.d_out);
  if (key == "batch") return size(c.batch);
  if (key == "seq_len") return size(c.seq_len);
  if (key == "kv_seq_len") return size(c.kv_seq_len);
  if (key == "kv_heads") return size(c.kv_heads);
  if (key == "window") return size(c.window);
  if (key == "d_ff") return size(c.d_ff);
  if (key == "rope_dim") return size(c.rope_dim);
  if (key == "position_offset") {
    c.position_offset = v.is_null() ? 0 : get_int(v, where, 0, kMaxSize);
    return true;
  }
  if (key == "num_layers") {
    c.num_layers = v.is_null() ? std::nullopt : std::optional(get_int(v, where, 1, 1024));
    return true;
  }
  if (key == "memory") return path(c.memory);
  if (key == "weights_prefix") {
    c.weights_prefix =
        v.is_null() ? std::nullopt : std::optional(get_string(v, where, "a tensor name prefix"));
    return true;
  }
  if (key == "keras_layer") {
    c.keras_layer =
        v.is_null() ? std::nullopt : std::optional(get_string(v, where, "a Keras layer name"));
    return true;
  }
  if (key == "layer_index") {
    c.layer_index = v.is_null() ? std::nullopt : std::optional(get_int(v, where, 0, kMaxSize));
    return true;
  }
  if (key == "norm_first") return flag(c.norm_first, false);
  if (key == "final_norm") {
    c.final_norm = v.is_null() ? std::nullopt : std::optional(get_bool(v, where));
    return true;
  }
  if (key == "save_hidden_states") return flag(c.save_hidden_states, false);
  if (key == "use_bias") {
    c.use_bias = v.is_null() ? std::nullopt : std::optional(get_bool(v, where));
    return true;
  }
  if (key == "key_padding_mask") return path(c.key_padding_mask);
  if (key == "bias") return path(c.bias);
  if (key == "query") return path(c.query);
  if (key == "key") return path(c.key);
  if (key == "value") return path(c.value);
  if (key == "weights") return path(c.weights);
  if (key == "mask") return path(c.mask);
  if (key == "out_dir") {
    c.out_dir = v.is_null() ? "out" : get_string(v, where, "a directory path (string)");
    return true;
  }
  if (key == "alibi") return flag(c.alibi, false);
  if (key == "allow_nonfinite") return flag(c.allow_nonfinite, false);
  if (key == "warmup") return flag(c.warmup, false);
  if (key == "save_attention") return flag(c.save_attention, false);
  if (key == "average_heads") return flag(c.average_heads, false);
  if (key == "plot") return flag(c.plot, false);
  if (key == "save_inputs") return flag(c.save_inputs, false);
  return false;
}

bool set_choice(Config& c, const std::string& key, const json& v, const std::string& where) {
  if (key == "weights_format") {
    static const std::pair<const char*, WeightsFormat> names[] = {
        {"auto", WeightsFormat::auto_detect},
        {"native", WeightsFormat::native},
        {"torch", WeightsFormat::torch},
        {"keras", WeightsFormat::keras}};
    c.weights_preset.clear();
    if (v.is_string() && preset_family(v.get<std::string>())) {  // a family's own names
      c.weights_format = WeightsFormat::preset;
      c.weights_preset = v.get<std::string>();
      return true;
    }
    const bool layout = v.is_null() || (v.is_string() && v.get<std::string>() != "preset" &&
                                        std::any_of(std::begin(names), std::end(names),
                                                    [&](const auto& n) { return v == n.first; }));
    if (!layout) {
      std::string families;
      for (const Family* f : mha::families())
        families += (families.empty() ? "" : ", ") + std::string(f->name);
      fail_input(where + ": expected 'auto', 'native', 'torch', 'keras' or a model family (" +
                 families + ") or model_type, got " + json_excerpt(v));
    }
    c.weights_format = v.is_null() ? WeightsFormat::auto_detect : get_enum(v, where, names);
    return true;
  }
  if (key == "mask_true_means") {
    static const std::pair<const char*, MaskTrueMeans> names[] = {
        {"attend", MaskTrueMeans::attend}, {"ignore", MaskTrueMeans::ignore}};
    c.mask_true_means = v.is_null() ? MaskTrueMeans::attend : get_enum(v, where, names);
    return true;
  }
  if (key == "dtype") {
    static const std::pair<const char*, ComputeType> names[] = {
        {"float32", ComputeType::float32},
        {"float64", ComputeType::float64},
        {"bfloat16", ComputeType::bfloat16}};
    c.dtype = v.is_null() ? ComputeType::float32 : get_enum(v, where, names);
    return true;
  }
  if (key == "output_dtype") {
    static const std::pair<const char*, OutputType> names[] = {{"float16", OutputType::float16},
                                                               {"float32", OutputType::float32},
                                                               {"float64", OutputType::float64}};
    c.output_dtype = v.is_null() ? std::nullopt : std::optional(get_enum(v, where, names));
    return true;
  }
  if (key == "masked_rows") {
    static const std::pair<const char*, MaskedRows> names[] = {
        {"zero", MaskedRows::zero}, {"uniform", MaskedRows::uniform}, {"nan", MaskedRows::nan}};
    c.masked_rows = v.is_null() ? MaskedRows::zero : get_enum(v, where, names);
    return true;
  }
  if (key == "rope") {
    using R = Config::RopeKind;
    if (v.is_null() || (v.is_boolean() && !v.get<bool>())) return c.rope = R::none, true;
    if (v.is_boolean()) return c.rope = R::half, true;
    static const std::pair<const char*, R> names[] = {{"half", R::half},
                                                      {"interleaved", R::interleaved}};
    for (const auto& [name, value] : names)
      if (v.is_string() && v.get<std::string>() == name) return c.rope = value, true;
    fail_input(where + ": expected false, true (= 'half'), 'half' or 'interleaved', got " +
               json_excerpt(v));
  }
  if (key == "layer") {
    static const std::pair<const char*, LayerKind> names[] = {{"attention", LayerKind::attention},
                                                              {"encoder", LayerKind::encoder},
                                                              {"decoder", LayerKind::decoder}};
    c.layer = v.is_null() ? LayerKind::attention : get_enum(v, where, names);
    return true;
  }
  if (key == "activation") {
    static const std::pair<const char*, Activation> names[] = {
        {"relu", Activation::relu},
        {"gelu", Activation::gelu},
        {"gelu_tanh", Activation::gelu_tanh}};
    c.activation = v.is_null() ? Activation::relu : get_enum(v, where, names);
    return true;
  }
  if (key == "causal") {
    c.causal_given = !v.is_null();
    if (v.is_null()) return c.causal = Causal::none, true;
    if (v.is_boolean()) return c.causal = v.get<bool>() ? Causal::top_left : Causal::none, true;
    static const std::pair<const char*, Causal> names[] = {{"top-left", Causal::top_left},
                                                           {"bottom-right", Causal::bottom_right}};
    for (const auto& [name, value] : names)
      if (v.is_string() && v.get<std::string>() == name) return c.causal = value, true;
    fail_input(where + ": expected true, false, 'top-left' or 'bottom-right', got " +
               json_excerpt(v));
  }
  if (key == "save_weights") {
    // false, true (= native), or the layout to write.
    static const std::pair<const char*, WeightsFormat> names[] = {{"native", WeightsFormat::native},
                                                                  {"torch", WeightsFormat::torch},
                                                                  {"keras", WeightsFormat::keras}};
    c.save_weights_format = WeightsFormat::native;
    if (v.is_null() || v.is_boolean()) {
      c.save_weights = v.is_boolean() && v.get<bool>();
      return true;
    }
    if (!v.is_string())
      fail_input(where + ": expected true, false, 'native', 'torch' or 'keras', got " +
                 json_excerpt(v));
    c.save_weights_format = get_enum(v, where, names);
    c.save_weights = true;
    return true;
  }
  return false;
}

bool set_number(Config& c, const std::string& key, const json& v, const std::string& where) {
  if (key == "scale") {
    if (v.is_null()) return c.scale.reset(), true;
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() == 0.0)
      fail_input(where + ": expected a finite non-zero number, got " + json_excerpt(v));
    c.scale = v.get<double>();
    return true;
  }
  if (key == "rope_theta" || key == "rope_scaling") {
    double& field = key == "rope_theta" ? c.rope_theta : c.rope_scaling;
    if (v.is_null()) return field = key == "rope_theta" ? 10000 : 1, true;
    const bool number = v.is_number() && std::isfinite(v.get<double>());
    if (!number || (key == "rope_theta" ? v.get<double>() <= 0 : v.get<double>() < 1))
      fail_input(where +
                 (key == "rope_theta" ? ": expected a finite positive number, got "
                                      : ": expected a finite number >= 1, got ") +
                 json_excerpt(v));
    field = v.get<double>();
    return true;
  }
  if (key == "qk_norm_eps") {
    if (v.is_null()) return c.qk_norm_eps = 1e-6, true;
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0)
      fail_input(where + ": expected a finite positive number, got " + json_excerpt(v));
    c.qk_norm_eps = v.get<double>();
    return true;
  }
  if (key == "layer_norm_eps") {
    if (v.is_null()) return c.layer_norm_eps = 1e-5, true;
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0)
      fail_input(where + ": expected a finite positive number, got " + json_excerpt(v));
    c.layer_norm_eps = v.get<double>();
    return true;
  }
  if (key == "softcap") {
    if (v.is_null()) return c.softcap.reset(), true;
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0)
      fail_input(where + ": expected a finite positive number, got " + json_excerpt(v));
    c.softcap = v.get<double>();
    return true;
  }
  if (key == "seed") {
    if (v.is_null()) return c.seed = 0, true;
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
      fail_input(where + ": expected a non-negative integer below 2^64, got " + json_excerpt(v));
    c.seed = v.get<std::uint64_t>();
    return true;
  }
  if (key == "threads") {
    c.threads = v.is_null() ? 0 : static_cast<int>(get_int(v, where, 0, 1024));
    return true;
  }
  if (key == "repeat") {
    c.repeat = v.is_null() ? 1 : static_cast<int>(get_int(v, where, 1, kMaxRepeat));
    return true;
  }
  if (key == "max_memory") {
    if (v.is_null()) return c.max_memory.reset(), true;
    if (v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() > 0)) {
      c.max_memory = v.get<std::uint64_t>();
      return true;
    }
    if (!v.is_string())
      fail_input(where + ": expected a size such as \"8GiB\" or a number of bytes, got " +
                 json_excerpt(v));
    c.max_memory = parse_byte_size(v.get<std::string>(), where);
    return true;
  }
  return false;
}

bool set_list(Config& c, const std::string& key, const json& v, const std::string& where) {
  if (key == "attention_axes") {
    c.attention_axes.reset();
    if (v.is_null()) return true;
    if (!v.is_array() || v.empty())
      fail_input(where + ": expected a non-empty list of axis indices such as [2, 3], got " +
                 json_excerpt(v));
    std::vector<std::int64_t> axes;
    for (std::size_t i = 0; i < v.size(); ++i)
      axes.push_back(get_int(v[i], where + "[" + std::to_string(i) + "]", -64, 64));
    c.attention_axes = std::move(axes);
    return true;
  }
  if (key == "memory_key_lengths") {
    c.memory_key_lengths.reset();
    if (v.is_null()) return true;
    if (!v.is_array() || v.empty())
      fail_input(where + ": expected a non-empty list of integers, got " + json_excerpt(v));
    std::vector<std::int64_t> lengths;
    for (std::size_t i = 0; i < v.size(); ++i)
      lengths.push_back(get_int(v[i], where + "[" + std::to_string(i) + "]", 0, kMaxSize));
    c.memory_key_lengths = std::move(lengths);
    return true;
  }
  if (key == "key_lengths") {
    c.key_lengths.reset();
    c.key_lengths_file.reset();
    if (v.is_null()) return true;
    if (v.is_string()) return c.key_lengths_file = get_string(v, where, "a .npy path"), true;
    if (!v.is_array() || v.empty())
      fail_input(where + ": expected a non-empty list of integers or a .npy path, got " +
                 json_excerpt(v));
    std::vector<std::int64_t> lengths;
    for (std::size_t i = 0; i < v.size(); ++i)
      lengths.push_back(get_int(v[i], where + "[" + std::to_string(i) + "]", 0, kMaxSize));
    c.key_lengths = std::move(lengths);
    return true;
  }
  return false;
}

// Sets one key from a JSON value. `where` names the key and its source.
void set_key(Config& c, const std::string& key, const json& v, const std::string& where) {
  if (set_size_path_or_flag(c, key, v, where) || set_choice(c, key, v, where) ||
      set_number(c, key, v, where) || set_list(c, key, v, where))
    return;
  std::string hint = nearest_key(key);
  fail_input(where + ": unknown key" +
             (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)"));
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// An integer flag beyond 64 bits: a float, as a JSON file would give, so the
// key's own type check reports it.
json too_big(const std::string& text, const std::string& where) {
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    fail_input(where + ": expected an integer, got " + quote(text) + " (out of range)");
  }
}

// Flag text to the JSON value the same key would have in a file.
json flag_value(const std::string& key, const std::string& text, const std::string& where) {
  const ConfigKey* spec = nullptr;
  for (const auto& k : kKeys)
    if (key == k.name) spec = &k;
  if (!spec) {
    std::string hint = nearest_key(key);
    fail_input(where + ": unknown option" +
               (hint.empty() ? "" : " (did you mean --" + hint + "?)"));
  }
  const std::string hint = spec->value_hint;
  if (hint == "INT") {
    // Strict: the whole text is an optionally signed decimal integer. Values
    // beyond 64 bits become a float, as in a JSON file, and fail the type check.
    const bool negative = !text.empty() && text[0] == '-';
    const std::string digits = text.substr(negative ? 1 : 0);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
      fail_input(where + ": expected an integer, got " + quote(text));
    std::uint64_t magnitude = 0;
    for (char ch : digits) {
      const std::uint64_t digit = static_cast<std::uint64_t>(ch - '0');
      if (magnitude > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
        return too_big(text, where);
      magnitude = magnitude * 10 + digit;
    }
    if (!negative) return magnitude;
    if (magnitude > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return too_big(text, where);
    return -static_cast<std::int64_t>(magnitude);
  }
  // causal and save_weights take a bool or a word; the bool spellings of
  // flags (1, yes, on, ...) work for them too.
  const bool bool_or_word = spec->is_bool && hint != "BOOL";
  static const char* const kTrue[] = {"true", "1", "yes", "on"};
  static const char* const kFalse[] = {"false", "0", "no", "off"};
  for (const char* t : kTrue)
    if (text == t && (hint == "BOOL" || bool_or_word)) return true;
  for (const char* f : kFalse)
    if (text == f && (hint == "BOOL" || bool_or_word)) return false;
  if (hint == "BOOL") fail_input(where + ": expected true or false, got " + quote(text));
  if (hint == "FLOAT") {
    std::size_t used = 0;
    double d = 0;
    try {
      d = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text.empty())
      fail_input(where + ": expected a number, got " + quote(text));
    if (!std::isfinite(d))
      fail_input(where + ": expected a finite non-zero number, got " + quote(text));
    return d;
  }
  if (key == "attention_axes") {
    json list = json::array();
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) list.push_back(flag_value("seed", item, where));
    if (text.empty() || text.back() == ',')
      fail_input(where + ": expected comma-separated axis indices such as 2,3, got " + quote(text));
    return list;
  }
  if ((key == "key_lengths" && text.find(".npy") == std::string::npos) ||
      key == "memory_key_lengths") {
    json list = json::array();
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) list.push_back(flag_value("batch", item, where));
    if (!text.empty() && text.back() == ',')
      fail_input(where + ": expected comma-separated integers, got " + quote(text));
    return list;
  }
  return text;
}

}  // namespace

void Config::apply(const json& object, const std::string& source) {
  if (!object.is_object())
    fail_input(source + ": expected a JSON object of config keys, got " + json_excerpt(object));
  for (const auto& [key, value] : object.items())
    set_key(*this, key, value, source + ": key " + quote(key));
}

void Config::apply_flag(const std::string& key, const std::string& text) {
  std::string where = "--" + key;
  set_key(*this, key, flag_value(key, text, where), where);
}

json Config::to_json() const {
  auto opt = [](const auto& o) { return o ? json(*o) : json(nullptr); };
  json j;
  j["h"] = opt(h);
  j["d_model"] = opt(d_model);
  j["d_k"] = opt(d_k);
  j["d_v"] = opt(d_v);
  j["kdim"] = opt(kdim);
  j["vdim"] = opt(vdim);
  j["d_out"] = opt(d_out);
  j["batch"] = opt(batch);
  j["seq_len"] = opt(seq_len);
  j["kv_seq_len"] = opt(kv_seq_len);
  j["use_bias"] = opt(use_bias);
  j["scale"] = opt(scale);
  j["dtype"] = to_string(dtype);
  j["seed"] = seed;
  j["threads"] = threads;
  j["max_memory"] = opt(max_memory);
  j["allow_nonfinite"] = allow_nonfinite;
  j["repeat"] = repeat;
  j["warmup"] = warmup;
  j["query"] = opt(query);
  j["key"] = opt(key);
  j["value"] = opt(value);
  j["weights"] = opt(weights);
  j["weights_format"] =
      weights_format == WeightsFormat::preset ? weights_preset : to_string(weights_format);
  j["layer_index"] = opt(layer_index);
  j["weights_prefix"] = opt(weights_prefix);
  j["keras_layer"] = opt(keras_layer);
  // A decoder's default (causal) is its own: null until given, so a run.json's
  // "top-left" (the plan sets it) still matches the config it came from.
  j["causal"] = layer == LayerKind::decoder && !causal_given ? json(nullptr)
                : causal == Causal::none                     ? json(false)
                                                             : json(to_string(causal));
  j["mask"] = opt(mask);
  j["mask_true_means"] = to_string(mask_true_means);
  j["key_padding_mask"] = opt(key_padding_mask);
  j["key_lengths"] = key_lengths ? json(*key_lengths) : opt(key_lengths_file);
  j["masked_rows"] = to_string(masked_rows);
  j["out_dir"] = out_dir;
  j["save_attention"] = save_attention;
  j["average_heads"] = average_heads;
  j["plot"] = plot;
  j["save_weights"] = save_weights ? json(to_string(save_weights_format)) : json(false);
  j["save_inputs"] = save_inputs;
  j["kv_heads"] = opt(kv_heads);
  j["window"] = opt(window);
  j["alibi"] = alibi;
  j["bias"] = opt(bias);
  j["softcap"] = opt(softcap);
  j["attention_axes"] = opt(attention_axes);
  j["output_dtype"] = output_dtype ? json(to_string(*output_dtype)) : json(nullptr);
  j["rope"] =
      rope == RopeKind::none ? json(false) : json(rope == RopeKind::half ? "half" : "interleaved");
  j["rope_theta"] = rope_theta;
  j["rope_dim"] = opt(rope_dim);
  j["position_offset"] = position_offset;
  j["rope_scaling"] = rope_scaling;
  j["qk_norm_eps"] = qk_norm_eps;
  j["layer"] = to_string(layer);
  j["num_layers"] = opt(num_layers);
  j["d_ff"] = opt(d_ff);
  j["activation"] = to_string(activation);
  j["norm_first"] = norm_first;
  j["layer_norm_eps"] = layer_norm_eps;
  j["final_norm"] = opt(final_norm);
  j["memory"] = opt(memory);
  j["memory_key_lengths"] = opt(memory_key_lengths);
  j["save_hidden_states"] = save_hidden_states;
  return j;
}

json parse_config_text(const std::string& text, const std::string& source) {
  return parse_json(text, source, json_kind::tool_config);
}

json read_config_file(const std::string& path) {
  return read_json_file(path, json_kind::tool_config);
}

void check_config_paths(const json& file, const std::string& config_path,
                        const std::vector<std::string>& overridden) {
  namespace fs = std::filesystem;
  if (!file.is_object()) return;
  for (const auto& k : kKeys) {
    if (std::string_view(k.value_hint) != "PATH" ||
        std::find(overridden.begin(), overridden.end(), k.name) != overridden.end())
      continue;
    const auto it = file.find(k.name);
    if (it == file.end() || !it->is_string()) continue;
    const fs::path p(it->get<std::string>());
    std::error_code ec;
    if (p.empty() || p.is_absolute() ||
        fs::symlink_status(p, ec).type() != fs::file_type::not_found)
      continue;
    std::string msg = config_path + ": " + k.name + " " + echo(p.string()) +
                      ": no such file; paths in a config file are relative to the working "
                      "directory, " +
                      echo(fs::current_path(ec).string());
    const fs::path beside = fs::path(config_path).parent_path() / p;
    if (fs::symlink_status(beside, ec).type() != fs::file_type::not_found)
      msg += " (relative to the config file it would be " + echo(beside.string()) + ")";
    fail_input(msg);
  }
}

const std::vector<ConfigKey>& config_keys() {
  return kKeys;
}

std::string nearest_key(const std::string& name, const std::vector<std::string>& names) {
  std::string normalized = name;
  std::replace(normalized.begin(), normalized.end(), '-', '_');
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& k : names) {
    std::size_t d = edit_distance(normalized, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  // Suggest only plausible typos: a third of the name may differ.
  return best_distance <= std::max<std::size_t>(2, best.size() / 3) ? best : "";
}

std::string nearest_key(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& k : kKeys) names.push_back(k.name);
  return nearest_key(name, names);
}

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::attention:
      return "attention";
    case LayerKind::encoder:
      return "encoder";
    case LayerKind::decoder:
      return "decoder";
  }
  return "?";
}

const char* to_string(Activation a) {
  switch (a) {
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::silu:
      return "silu";
  }
  return "?";
}

const char* to_string(Causal c) {
  switch (c) {
    case Causal::none:
      return "false";
    case Causal::top_left:
      return "top-left";
    case Causal::bottom_right:
      return "bottom-right";
  }
  return "?";
}

const char* to_string(MaskedRows m) {
  switch (m) {
    case MaskedRows::zero:
      return "zero";
    case MaskedRows::uniform:
      return "uniform";
    case MaskedRows::nan:
      return "nan";
  }
  return "?";
}

const char* to_string(MaskTrueMeans m) {
  return m == MaskTrueMeans::attend ? "attend" : "ignore";
}

const char* to_string(ComputeType t) {
  return t == ComputeType::float32 ? "float32" : t == ComputeType::float64 ? "float64" : "bfloat16";
}

const char* to_string(OutputType t) {
  return t == OutputType::float16 ? "float16" : t == OutputType::float32 ? "float32" : "float64";
}

}  // namespace mha
