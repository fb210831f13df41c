// LLaMA (modeling_llama.py) and the families that share its names: Mistral
// (a sliding window on every layer), Qwen2 (q, k, v biases; a window on the
// layers from max_window_layers on with use_sliding_window), Qwen3 (QK-norm).
// RMSNorm, pre-norm, SwiGLU, rotary positions in the half layout.
#include "family_list.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  const std::string& t = c.model_type;
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.kv_heads = k.size({"num_key_value_heads"}, c.h);
  c.head_dim = k.size({"head_dim"}, c.d_model / c.h);
  c.d_ff = k.size({"intermediate_size"}, std::nullopt);
  c.vocab_size = k.size({"vocab_size"}, std::nullopt);
  c.max_positions = k.size({"max_position_embeddings"}, 2048);
  c.norm_eps = k.number({"rms_norm_eps"}, 1e-6, true);
  c.rope = true;
  c.rope_theta = k.number({"rope_theta"}, 10000, true);
  c.rope_scaling = k.rope_scaling();
  c.activation = k.activation("hidden_act", "silu");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", false);
  c.qkv_bias = t == "qwen2" || k.flag("attention_bias", false);
  if (t != "qwen2" && k.flag("attention_bias", false))
    k.fail("key 'attention_bias' is true; expected false (an output-projection bias is not read)");
  if (k.flag("mlp_bias", false)) k.fail("key 'mlp_bias' is true; expected false (not supported)");
  c.qk_norm = t == "qwen3";
  if (t == "mistral") {
    c.sliding_window = k.size({"sliding_window"}, std::size_t{0}, true);
    c.sliding.assign(c.num_layers, 1);
  } else if (k.flag("use_sliding_window", false)) {
    // Qwen2Config: the window on the layers from max_window_layers on, unless
    // layer_types lists them.
    c.sliding_window = k.size({"sliding_window"}, std::size_t{0}, true);
    const std::size_t first = k.size({"max_window_layers"}, std::size_t{28}, true);
    c.sliding = k.sliding_layers(c.num_layers, [&](std::size_t l) { return l >= first; });
  }
}

using namespace table;
constexpr auto q = Dim::q;
constexpr auto kv = Dim::kv;

}  // namespace

const Family llama_family = {
    "llama",
    {"llama", "mistral", "qwen2", "qwen3"},
    {},
    read_config,
    {
        {Role::token_embedding, W, "model.embed_tokens.weight", Dim::vocab, d, Layout::table},
        {Role::attn_norm, W, "model.layers.{l}.input_layernorm.weight", d, none, vec},
        {Role::q, W, "model.layers.{l}.self_attn.q_proj.weight", q, d, lin},
        {Role::q, B, "model.layers.{l}.self_attn.q_proj.bias", q, none, vec, When::qkv_bias},
        {Role::k, W, "model.layers.{l}.self_attn.k_proj.weight", kv, d, lin},
        {Role::k, B, "model.layers.{l}.self_attn.k_proj.bias", kv, none, vec, When::qkv_bias},
        {Role::v, W, "model.layers.{l}.self_attn.v_proj.weight", kv, d, lin},
        {Role::v, B, "model.layers.{l}.self_attn.v_proj.bias", kv, none, vec, When::qkv_bias},
        {Role::o, W, "model.layers.{l}.self_attn.o_proj.weight", d, q, lin},
        {Role::q_norm, W, "model.layers.{l}.self_attn.q_norm.weight", Dim::head_dim, none, vec,
         When::qk_norm},
        {Role::k_norm, W, "model.layers.{l}.self_attn.k_norm.weight", Dim::head_dim, none, vec,
         When::qk_norm},
        {Role::ffn_norm, W, "model.layers.{l}.post_attention_layernorm.weight", d, none, vec},
        {Role::gate, W, "model.layers.{l}.mlp.gate_proj.weight", f, d, lin},
        {Role::up, W, "model.layers.{l}.mlp.up_proj.weight", f, d, lin},
        {Role::down, W, "model.layers.{l}.mlp.down_proj.weight", d, f, lin},
        {Role::final_norm, W, "model.norm.weight", d, none, vec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
