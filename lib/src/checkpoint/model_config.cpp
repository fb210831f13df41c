#include "mha/checkpoint/model_config.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"

namespace mha {

namespace {

using nlohmann::json;

// Reads config.json's keys with the file's name in every message.
class Keys {
 public:
  Keys(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  const json* find(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (j_.contains(n) && !j_[n].is_null()) return &j_[n];
    return nullptr;
  }
  // A positive size under any of `names` (the first is the one messages name).
  std::size_t size(std::initializer_list<const char*> names, std::optional<std::size_t> fallback,
                   bool zero_ok = false) const {
    const json* v = find(names);
    if (!v) {
      if (fallback) return *fallback;
      fail_input(path_ + ": key '" + *names.begin() + "' is missing; expected a positive integer");
    }
    if (!v->is_number_integer() || v->get<std::int64_t>() < (zero_ok ? 0 : 1) ||
        v->get<std::int64_t>() > (std::int64_t{1} << 32))
      fail_input(path_ + ": key '" + *names.begin() + "' is " + one_line(v->dump(), kEchoChars) +
                 "; expected a positive integer");
    return v->get<std::size_t>();
  }
  double number(std::initializer_list<const char*> names, double fallback, bool positive) const {
    const json* v = find(names);
    if (!v) return fallback;
    if (!v->is_number() || (positive && !(v->get<double>() > 0)))
      fail_input(path_ + ": key '" + *names.begin() + "' is " + one_line(v->dump(), kEchoChars) +
                 "; expected a " + (positive ? "positive " : "") + "number");
    return v->get<double>();
  }
  bool flag(const char* name, bool fallback) const {
    const json* v = find({name});
    if (!v) return fallback;
    if (!v->is_boolean())
      fail_input(path_ + ": key '" + name + "' is " + one_line(v->dump(), kEchoChars) +
                 "; expected true or false");
    return v->get<bool>();
  }
  std::optional<std::int64_t> id(const char* name) const {
    const json* v = find({name});
    if (!v) return std::nullopt;
    if (v->is_array() && !v->empty()) v = &(*v)[0];  // a list of ids: the first
    if (!v->is_number_integer()) return std::nullopt;
    return v->get<std::int64_t>();
  }
  std::string string(const char* name, const std::string& fallback) const {
    const json* v = find({name});
    if (!v) return fallback;
    if (!v->is_string())
      fail_input(path_ + ": key '" + name + "' is " + one_line(v->dump(), kEchoChars) +
                 "; expected a string");
    return v->get<std::string>();
  }
  [[noreturn]] void fail(const std::string& what) const { fail_input(path_ + ": " + what); }

 private:
  const json& j_;
  std::string path_;
};

Activation activation_of(const Keys& k, const char* key, const std::string& fallback) {
  const std::string a = k.string(key, fallback);
  if (a == "gelu") return Activation::gelu;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return Activation::gelu_tanh;
  if (a == "relu") return Activation::relu;
  if (a == "silu" || a == "swish") return Activation::silu;
  k.fail("key '" + std::string(key) + "' is " + echo(a) +
         "; expected gelu, gelu_new, gelu_pytorch_tanh, relu or silu");
}

void read_bert(const Keys& k, ModelConfig& c) {
  c.family = ModelFamily::bert;
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.d_ff = k.size({"intermediate_size"}, 4 * c.d_model);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 512);
  c.type_vocab_size = k.size({"type_vocab_size"}, 2);
  c.norm_eps = k.number({"layer_norm_eps"}, 1e-12, true);
  c.activation = activation_of(k, "hidden_act", "gelu");
  const std::string pos = k.string("position_embedding_type", "absolute");
  if (pos != "absolute")
    k.fail("key 'position_embedding_type' is " + echo(pos) + "; expected \"absolute\"");
  c.causal = c.pre_norm = c.rms_norm = false;
  c.qkv_bias = true;
}

void read_gpt2(const Keys& k, ModelConfig& c) {
  c.family = ModelFamily::gpt2;
  c.num_layers = k.size({"n_layer", "num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"n_embd", "hidden_size"}, std::nullopt);
  c.h = k.size({"n_head", "num_attention_heads"}, std::nullopt);
  c.d_ff = k.size({"n_inner"}, 4 * c.d_model);
  c.vocab_size = k.size({"vocab_size"}, 50257);
  c.max_positions = k.size({"n_positions", "max_position_embeddings"}, 1024);
  c.norm_eps = k.number({"layer_norm_epsilon"}, 1e-5, true);
  c.activation = activation_of(k, "activation_function", "gelu_new");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", true);
  if (k.flag("scale_attn_by_inverse_layer_idx", false))
    k.fail("key 'scale_attn_by_inverse_layer_idx' is true; expected false (not supported)");
  if (!k.flag("scale_attn_weights", true))
    k.fail("key 'scale_attn_weights' is false; expected true (not supported)");
  c.rms_norm = false;
  c.qkv_bias = true;
}

void read_llama(const Keys& k, ModelConfig& c) {
  c.family = ModelFamily::llama;
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.kv_heads = k.size({"num_key_value_heads"}, c.h);
  c.d_ff = k.size({"intermediate_size"}, std::nullopt);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 2048);
  c.norm_eps = k.number({"rms_norm_eps"}, 1e-6, true);
  c.rope_theta = k.number({"rope_theta"}, 10000, true);
  c.activation = activation_of(k, "hidden_act", "silu");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", false);
  const std::string& t = c.model_type;
  c.qkv_bias = t == "qwen2" || k.flag("attention_bias", false);
  if (t != "qwen2" && k.flag("attention_bias", false))
    k.fail("key 'attention_bias' is true; expected false (an output-projection bias is not read)");
  if (k.flag("mlp_bias", false)) k.fail("key 'mlp_bias' is true; expected false (not supported)");
  c.qk_norm = t == "qwen3";
  if (t == "mistral") {
    c.sliding_window = k.size({"sliding_window"}, std::size_t{0}, true);
  } else if (k.flag("use_sliding_window", false)) {
    // Qwen2 as Hugging Face defines it: the window on layers from max_window_layers on
    // (layer_types, where config.json has it, says the same per layer). This forward has one
    // window for every layer, so a checkpoint that mixes the two is refused by name.
    const std::size_t window = k.size({"sliding_window"}, std::size_t{0}, true);
    std::size_t sliding = 0;  // layers with the window
    if (const json* types = k.find({"layer_types"})) {
      if (!types->is_array() || types->size() != c.num_layers)
        k.fail("key 'layer_types' is " + one_line(types->dump(), kEchoChars) +
               "; expected one entry per layer");
      for (const json& type : *types) {
        if (type == "sliding_attention")
          ++sliding;
        else if (type != "full_attention")
          k.fail("key 'layer_types' holds " + one_line(type.dump(), kEchoChars) +
                 "; expected \"full_attention\" or \"sliding_attention\"");
      }
    } else {
      const std::size_t first = k.size({"max_window_layers"}, std::size_t{28}, true);
      sliding = c.num_layers > first ? c.num_layers - first : 0;
    }
    if (sliding != 0 && sliding != c.num_layers)
      k.fail("use_sliding_window gives " + std::to_string(sliding) + " of " +
             std::to_string(c.num_layers) +
             " layers a sliding window (max_window_layers, layer_types); a window on some "
             "layers and not others is not supported");
    c.sliding_window = sliding ? window : 0;
  }
  if (const json* rs = k.find({"rope_scaling"})) {
    if (!rs->is_object())
      k.fail("key 'rope_scaling' is " + one_line(rs->dump(), kEchoChars) + "; expected an object");
    std::string type;
    for (const char* n : {"rope_type", "type"})
      if (rs->contains(n) && (*rs)[n].is_string()) type = (*rs)[n].get<std::string>();
    if (type == "linear") {
      if (!rs->contains("factor") || !(*rs)["factor"].is_number() ||
          !((*rs)["factor"].get<double>() > 0))
        k.fail("key 'rope_scaling.factor' is missing or not a positive number");
      c.rope_scaling = (*rs)["factor"].get<double>();
    } else if (type != "default") {
      k.fail("key 'rope_scaling' has type " + echo(type) +
             "; expected \"linear\" (other context-extension scalings are not supported)");
    }
  }
}

// The sizes' products in 128-bit arithmetic: every weight matrix, and all of
// them together, stays under kMaxParameters, so that no product of two sizes
// the forward or the memory estimate forms can wrap in 64 bits.
void check_sizes(const ModelConfig& c, const std::string& path) {
  using u128 = unsigned __int128;
  constexpr u128 kMaxParameters = u128{1} << 40;  // 4 TiB of float32
  const u128 d = c.d_model, q = u128{c.h} * c.head_dim, kv = u128{c.kv_heads} * c.head_dim;
  const u128 layer = d * (q + 2 * kv) + q * d + 3 * d * c.d_ff + 4 * d + 2 * q;
  const u128 total = layer * c.num_layers + 2 * u128{c.vocab_size} * d + u128{c.max_positions} * d +
                     u128{c.type_vocab_size} * d;
  if (c.vocab_size > 0x7fffffff)
    fail_input(path + ": vocab_size " + std::to_string(c.vocab_size) +
               " is over 2^31 - 1; expected token ids that fit 32 bits");
  for (const u128 n : {q, kv, layer, total})
    if (n > kMaxParameters)
      fail_input(path + ": the sizes (" + std::to_string(c.num_layers) + " layers, hidden_size " +
                 std::to_string(c.d_model) + ", " + std::to_string(c.h) + " heads of " +
                 std::to_string(c.head_dim) + ", intermediate_size " + std::to_string(c.d_ff) +
                 ", vocab_size " + std::to_string(c.vocab_size) +
                 ") imply over 2^40 parameters; expected a model that can exist");
}

}  // namespace

const std::vector<std::string>& known_model_types() {
  static const std::vector<std::string> types = {"bert",    "gpt2",  "llama",
                                                 "mistral", "qwen2", "qwen3"};
  return types;
}

ModelConfig read_model_config(const std::string& path) {
  return parse_model_config(read_json_text(path, json_kind::model_config), path);
}

ModelConfig parse_model_config(std::string_view text, const std::string& path) {
  const json j = parse_json(text, path, json_kind::model_config);
  if (!j.is_object()) fail_input(path + ": expected a JSON object (a model's config.json)");
  const Keys k(j, path);
  ModelConfig c;
  std::string known;
  for (const std::string& t : known_model_types()) known += (known.empty() ? "" : ", ") + t;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    fail_input(path + ": key 'model_type' is missing; expected one of " + known);
  c.model_type = j["model_type"].get<std::string>();
  if (c.model_type == "bert")
    read_bert(k, c);
  else if (c.model_type == "gpt2")
    read_gpt2(k, c);
  else if (c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2" ||
           c.model_type == "qwen3")
    read_llama(k, c);
  else
    fail_input(path + ": model_type " + echo(c.model_type) + " is not supported; expected one of " +
               known);
  if (!c.kv_heads) c.kv_heads = c.h;
  if (c.family == ModelFamily::llama) {
    c.head_dim = k.size({"head_dim"}, c.d_model / c.h);
  } else {
    if (c.d_model % c.h)
      fail_input(path + ": hidden size " + std::to_string(c.d_model) + " is not a multiple of " +
                 std::to_string(c.h) + " heads");
    c.head_dim = c.d_model / c.h;
  }
  if (c.head_dim == 0)
    fail_input(path + ": head_dim is 0 (hidden_size " + std::to_string(c.d_model) + " over " +
               std::to_string(c.h) + " heads); expected a positive head size");
  check_sizes(c, path);
  if (c.h % c.kv_heads)
    fail_input(path + ": num_attention_heads " + std::to_string(c.h) +
               " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
  if (c.rms_norm && c.head_dim % 2)
    fail_input(path + ": head_dim " + std::to_string(c.head_dim) +
               " is odd; rotary embeddings need an even size");
  c.pad_token_id = k.id("pad_token_id");
  c.bos_token_id = k.id("bos_token_id");
  c.eos_token_id = k.id("eos_token_id");
  c.torch_dtype = k.string("torch_dtype", "");
  return c;
}

}  // namespace mha
