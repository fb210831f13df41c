// StableLM (modeling_stablelm.py): LLaMA's names and SwiGLU with LayerNorms
// (weight and bias), rotary positions on the first partial_rotary_factor of
// each head, and q, k, v biases with use_qkv_bias. use_parallel_residual
// (attention and MLP on one norm's output) and qk_layernorm are refused by
// name.
#include "family_list.hpp"

namespace mha {

namespace {

void read_config(const ConfigKeys& k, ModelConfig& c) {
  c.num_layers = k.size({"num_hidden_layers"}, std::nullopt);
  c.d_model = k.size({"hidden_size"}, std::nullopt);
  c.h = k.size({"num_attention_heads"}, std::nullopt);
  c.kv_heads = k.size({"num_key_value_heads"}, c.h);
  c.d_ff = k.size({"intermediate_size"}, 6912);
  c.vocab_size = k.size({"vocab_size"}, 50304);
  c.max_positions = k.size({"max_position_embeddings"}, 4096);
  c.norm_eps = k.number({"layer_norm_eps"}, 1e-5, true);
  c.rms_norm = false;
  c.rope = true;
  c.rope_theta = k.number({"rope_theta"}, 10000, true);
  c.rope_scaling = k.rope_scaling();
  c.rotary_fraction = k.number({"partial_rotary_factor"}, 0.25, true);
  if (c.rotary_fraction > 1)
    k.fail("key 'partial_rotary_factor' is " + std::to_string(c.rotary_fraction) +
           "; expected at most 1");
  c.activation = k.activation("hidden_act", "silu");
  c.tie_word_embeddings = k.flag("tie_word_embeddings", false);
  c.qkv_bias = k.flag("use_qkv_bias", false);
  if (k.flag("use_parallel_residual", false))
    k.fail("key 'use_parallel_residual' is true; expected false (not supported)");
  if (k.flag("qk_layernorm", false))
    k.fail("key 'qk_layernorm' is true; expected false (not supported)");
}

using namespace table;
constexpr auto q = Dim::q;
constexpr auto kv = Dim::kv;
constexpr auto qb = When::qkv_bias;

}  // namespace

const Family stablelm_family = {
    "stablelm",
    {"stablelm"},
    {},
    read_config,
    {
        {Role::token_embedding, W, "model.embed_tokens.weight", Dim::vocab, d, Layout::table},
        {Role::attn_norm, W, "model.layers.{l}.input_layernorm.weight", d, none, vec},
        {Role::attn_norm, B, "model.layers.{l}.input_layernorm.bias", d, none, vec},
        {Role::q, W, "model.layers.{l}.self_attn.q_proj.weight", q, d, lin},
        {Role::q, B, "model.layers.{l}.self_attn.q_proj.bias", q, none, vec, qb},
        {Role::k, W, "model.layers.{l}.self_attn.k_proj.weight", kv, d, lin},
        {Role::k, B, "model.layers.{l}.self_attn.k_proj.bias", kv, none, vec, qb},
        {Role::v, W, "model.layers.{l}.self_attn.v_proj.weight", kv, d, lin},
        {Role::v, B, "model.layers.{l}.self_attn.v_proj.bias", kv, none, vec, qb},
        {Role::o, W, "model.layers.{l}.self_attn.o_proj.weight", d, q, lin},
        {Role::ffn_norm, W, "model.layers.{l}.post_attention_layernorm.weight", d, none, vec},
        {Role::ffn_norm, B, "model.layers.{l}.post_attention_layernorm.bias", d, none, vec},
        {Role::gate, W, "model.layers.{l}.mlp.gate_proj.weight", f, d, lin},
        {Role::up, W, "model.layers.{l}.mlp.up_proj.weight", f, d, lin},
        {Role::down, W, "model.layers.{l}.mlp.down_proj.weight", d, f, lin},
        {Role::final_norm, W, "model.norm.weight", d, none, vec},
        {Role::final_norm, B, "model.norm.bias", d, none, vec},
        {Role::lm_head, W, "lm_head.weight", Dim::vocab, d, Layout::table, When::untied},
    }};

}  // namespace mha
